//! Generated filler text for long-context evaluation: varied sentences from a seeded generator
//! (many subjects, verbs, objects, places, years and sentence shapes), so a haystack is not one
//! repeated sentence and a model cannot find a needle just because it is the only novel line.

/// A small deterministic RNG (xorshift64*), so documents are reproducible from a seed.
#[derive(Clone, Debug)]
pub struct TextRng(u64);

impl TextRng {
    pub fn new(seed: u64) -> Self {
        TextRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

const SUBJECTS: &[&str] = &[
    "The old fisherman",
    "A young painter",
    "The village council",
    "Her grandmother",
    "The night watchman",
    "A travelling merchant",
    "The school teacher",
    "Two brothers",
    "The harbour master",
    "A quiet librarian",
    "The baker's apprentice",
    "An engineer from the coast",
    "The mayor",
    "A group of students",
    "The miller",
    "The blacksmith",
    "A visiting doctor",
    "The choir",
    "The lighthouse keeper",
    "A retired sailor",
    "The farmers",
    "The postman",
    "A wandering musician",
    "The museum curator",
    "The shepherd",
];
const VERBS: &[&str] = &[
    "repaired",
    "painted",
    "sold",
    "described",
    "carried",
    "measured",
    "planted",
    "borrowed",
    "mapped",
    "rebuilt",
    "photographed",
    "cleaned",
    "inspected",
    "counted",
    "decorated",
    "guarded",
    "restored",
    "studied",
    "delivered",
    "replaced",
];
const OBJECTS: &[&str] = &[
    "the wooden bridge",
    "a set of copper pots",
    "the chapel roof",
    "an old sailing boat",
    "the garden wall",
    "a box of letters",
    "the town clock",
    "a field of sunflowers",
    "the stone well",
    "a pair of boots",
    "the ferry timetable",
    "a collection of maps",
    "the market stalls",
    "a broken lantern",
    "the orchard fence",
    "a heavy anchor",
    "the river locks",
    "a basket of apples",
    "the bell tower",
    "a faded tapestry",
];
const PLACES: &[&str] = &[
    "near the northern pier",
    "behind the bakery",
    "on the hill road",
    "beside the canal",
    "in the lower valley",
    "at the edge of the forest",
    "across from the station",
    "in the market square",
    "along the old railway",
    "under the chestnut trees",
    "by the salt marsh",
    "outside the town hall",
    "in the east quarter",
];
const TIMES: &[&str] = &[
    "early one morning",
    "during the long winter",
    "after the spring floods",
    "before the harvest festival",
    "on a windy afternoon",
    "late in the autumn",
    "the summer after the storm",
    "at dawn on market day",
];
const CLAUSES: &[&str] = &[
    "and nobody in town was surprised",
    "although the weather was poor",
    "while the children watched",
    "because the old one had worn out",
    "as the bells rang for noon",
    "so that visitors would notice",
    "even though it took three weeks",
    "and the work was admired for years",
];

/// One sentence in one of several shapes.
pub fn sentence(rng: &mut TextRng) -> String {
    let (s, v, o, p) = (rng.pick(SUBJECTS), rng.pick(VERBS), rng.pick(OBJECTS), rng.pick(PLACES));
    let year = 1800 + rng.below(220);
    match rng.below(5) {
        0 => format!("{s} {v} {o} {p}."),
        1 => format!("In {year}, {} {v} {o} {p}.", lower_first(s)),
        2 => format!("{} {s} {v} {o}, {}.", capitalize(rng.pick(TIMES)), rng.pick(CLAUSES)),
        3 => format!("{s} {v} {o} {p}, {}.", rng.pick(CLAUSES)),
        _ => format!("It is said that {} {v} {o} {} in {year}.", lower_first(s), rng.pick(PLACES)),
    }
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    c.next().map_or_else(String::new, |f| f.to_lowercase().collect::<String>() + c.as_str())
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next().map_or_else(String::new, |f| f.to_uppercase().collect::<String>() + c.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varied_and_reproducible() {
        let mut a = TextRng::new(7);
        let s: Vec<String> = (0..200).map(|_| sentence(&mut a)).collect();
        let mut b = TextRng::new(7);
        assert_eq!(s, (0..200).map(|_| sentence(&mut b)).collect::<Vec<_>>());
        let mut uniq = s.clone();
        uniq.sort();
        uniq.dedup();
        assert!(uniq.len() > 190, "only {} distinct sentences of 200", uniq.len());
    }
}
