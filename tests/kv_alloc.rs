//! KV cache allocator invariants under random sequence lifecycles (property tests): no page,
//! ring page or slot is ever held twice; held + free = total at every step; a failed admit or
//! reserve changes nothing; releasing everything returns the cache to empty; exact page ids for a
//! scripted scenario.

use lserve::backend::DType;
use lserve::backend::cpu::CpuBackend;
use lserve::kv::{CacheShape, HeadLayout, KvCache, SeqPages};
use proptest::prelude::*;

fn cache(num_pages: usize, max_seqs: usize, streaming: bool) -> KvCache<CpuBackend> {
    let shape = CacheShape {
        num_layers: 1,
        n_kv_heads: 2,
        head_dim: 4,
        page_size: 16,
        logical_page: 4,
        num_pages,
        max_seqs,
        ring_tokens: if streaming { 32 } else { 0 },
        sink: 4,
        sel_stride: 2,
        layout: HeadLayout { streaming: vec![vec![false, streaming]] },
        kv_dtype: DType::F32,
    };
    KvCache::new(&CpuBackend::new(), shape).unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Admit,
    Reserve(usize, usize),
    Release(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        Just(Op::Admit),
        (0..8usize, 1..70usize).prop_map(|(s, n)| Op::Reserve(s, n)),
        (0..8usize).prop_map(Op::Release)
    ]
}

fn check_invariants(c: &KvCache<CpuBackend>, live: &[SeqPages]) {
    let mut pages: Vec<u32> = live.iter().flat_map(|s| s.pages.clone()).collect();
    let held = pages.len();
    pages.sort_unstable();
    pages.dedup();
    assert_eq!(pages.len(), held, "a page is held twice");
    assert_eq!(held + c.alloc.num_free(), c.alloc.num_pages(), "pages leaked or invented");
    let mut ring: Vec<u32> = live.iter().flat_map(|s| s.ring.clone()).collect();
    let held = ring.len();
    ring.sort_unstable();
    ring.dedup();
    assert_eq!(ring.len(), held, "a ring page is held twice");
    assert_eq!(held + c.str_alloc.num_free(), c.str_alloc.num_pages());
    let mut slots: Vec<u32> = live.iter().map(|s| s.slot).collect();
    slots.sort_unstable();
    slots.dedup();
    assert_eq!(slots.len(), live.len(), "a slot is held twice");
    for s in live {
        assert!(s.pages.len() * 16 >= s.len, "a sequence holds fewer pages than tokens");
    }
}

proptest! {
    #[test]
    fn random_lifecycles_keep_the_books(ops in proptest::collection::vec(op(), 1..200), streaming in any::<bool>()) {
        let mut c = cache(20, 4, streaming);
        let mut live: Vec<SeqPages> = vec![];
        for op in ops {
            match op {
                Op::Admit => {
                    let before = (c.alloc.num_free(), c.str_alloc.num_free());
                    match c.admit() {
                        Ok(s) => live.push(s),
                        Err(_) => {
                            prop_assert_eq!(live.len(), 4);
                            prop_assert_eq!(before, (c.alloc.num_free(), c.str_alloc.num_free()));
                        }
                    }
                }
                Op::Reserve(i, n) if !live.is_empty() => {
                    let i = i % live.len();
                    let (before, free) = (live[i].clone(), c.alloc.num_free());
                    match c.reserve(&mut live[i], n) {
                        Ok(()) => live[i].len += n,
                        Err(_) => {
                            prop_assert_eq!(&live[i], &before);
                            prop_assert_eq!(free, c.alloc.num_free());
                        }
                    }
                }
                Op::Release(i) if !live.is_empty() => {
                    let mut s = live.swap_remove(i % live.len());
                    c.release(&mut s).unwrap();
                    prop_assert!(s.pages.is_empty() && s.ring.is_empty() && !s.admitted);
                    c.release(&mut s).unwrap(); // releasing an emptied sequence is a no-op
                }
                _ => {}
            }
            check_invariants(&c, &live);
        }
        for mut s in live.drain(..) {
            c.release(&mut s).unwrap();
        }
        prop_assert_eq!(c.alloc.num_free(), 20);
        prop_assert_eq!(c.str_alloc.num_free(), c.str_alloc.num_pages());
    }
}

#[test]
fn exact_page_ids() {
    let mut c = cache(6, 2, false);
    let mut a = c.admit().unwrap();
    let mut b = c.admit().unwrap();
    assert_eq!((a.slot, b.slot), (0, 1));
    c.reserve(&mut a, 20).unwrap(); // 2 pages
    a.len = 20;
    c.reserve(&mut b, 16).unwrap(); // 1 page
    b.len = 16;
    assert_eq!((a.pages.clone(), b.pages.clone()), (vec![0, 1], vec![2]));
    c.reserve(&mut a, 12).unwrap(); // 32 tokens still fit in 2 pages
    a.len = 32;
    assert_eq!(a.pages, vec![0, 1]);
    assert!(c.reserve(&mut b, 100).is_err(), "7 pages needed, 3 free");
    assert_eq!(b.pages, vec![2]);
    c.release(&mut a).unwrap();
    c.reserve(&mut b, 40).unwrap();
    assert_eq!(b.pages, vec![2, 0, 1, 3], "lowest free ids first");
    assert!(c.admit().is_ok() && c.admit().is_err(), "two slots");
}
