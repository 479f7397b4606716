//! Chat templates: renders Hugging Face Jinja chat templates with minijinja, the way
//! `transformers`' `apply_chat_template` does.
//!
//! Environment (set once in [`ChatTemplate::new`], the template is compiled once):
//! * `trim_blocks` and `lstrip_blocks` on, trailing newline of the source dropped (jinja2
//!   defaults as HF configures them); no auto-escaping.
//! * Undefined values are lenient like jinja2's default `Undefined`: they print as empty and
//!   are falsy, but attribute access on them is an error.
//! * Python-style methods on strings, lists and dicts (`strip`, `startswith`, `split`, `items`,
//!   `get`, ...) via `minijinja_contrib::pycompat::unknown_method_callback`.
//! * Globals: `raise_exception(msg)` fails the render with `msg`; `strftime_now(fmt)` formats
//!   the current UTC time (common `%` directives). Filter `tojson` renders like HF's
//!   (`json.dumps(ensure_ascii=False)` with Python separators; `indent`, `sort_keys`).
//! * Context: `messages` (list of `{role, content}`), `add_generation_prompt`, `bos_token`,
//!   `eos_token` (empty strings when the model has none).
//!
//! Not supported: HF's `{% generation %}` tag.
//!
//! Bounds (a template comes from a model file and may be hostile): a render has [`RENDER_FUEL`]
//! instructions (minijinja's fuel: a loop nest that would run for hours is an error), minijinja
//! refuses `range` beyond 100 000 items and string repetition beyond 100 MB, and
//! [`ChatTemplate::render_bounded`] stops writing as soon as the output passes a byte limit (the
//! caller derives it from the context length), so a template that expands a message into
//! millions of tokens is refused before the text is tokenized. Not bounded: memory of strings a
//! template builds internally by repeated self-concatenation (minijinja has no hook for it).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Enumerator, Kwargs, Object, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind, UndefinedBehavior};

/// One chat turn.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Error compiling, loading or rendering a chat template.
#[derive(Debug)]
pub struct TemplateError(pub String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chat template: {}", self.0)
    }
}

impl std::error::Error for TemplateError {}

/// Fallback when a model has no template: ChatML.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}\
{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}\
{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const TEMPLATE_NAME: &str = "chat_template";

/// Instructions one render may execute (real templates use a few hundred per message).
pub const RENDER_FUEL: u64 = 50_000_000;

/// A compiled chat template plus the special-token strings it is rendered with.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compile a HF Jinja chat template.
    pub fn new(source: &str, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| TemplateError(e.to_string()))?;
        env.set_syntax(syntax);
        env.set_undefined_behavior(UndefinedBehavior::Lenient);
        env.set_unknown_method_callback(bounded_pycompat);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.set_fuel(Some(RENDER_FUEL));
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| TemplateError(format!("compile: {e}")))?;
        Ok(Self { env, bos_token: bos_token.unwrap_or_default(), eos_token: eos_token.unwrap_or_default() })
    }

    /// Render `messages`; with `add_generation_prompt` the template appends the assistant
    /// header so the model continues as the assistant.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, TemplateError> {
        let tmpl = self.env.get_template(TEMPLATE_NAME).map_err(|e| TemplateError(e.to_string()))?;
        tmpl.render(self.context(messages, add_generation_prompt)).map_err(|e| TemplateError(format!("render: {e}")))
    }

    /// As [`render`](Self::render), but Ok(None) as soon as the output would pass `max_bytes`
    /// (or the messages alone do): the rendering stops there instead of building the whole text.
    pub fn render_bounded(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        max_bytes: usize,
    ) -> Result<Option<String>, TemplateError> {
        if messages.iter().map(|m| m.content.len()).fold(0usize, usize::saturating_add) > max_bytes {
            return Ok(None);
        }
        let tmpl = self.env.get_template(TEMPLATE_NAME).map_err(|e| TemplateError(e.to_string()))?;
        let mut out = BoundedWriter { buf: Vec::new(), max: max_bytes, over: false };
        let r = tmpl.render_captured_to(self.context(messages, add_generation_prompt), &mut out);
        if out.over {
            return Ok(None);
        }
        r.map_err(|e| TemplateError(format!("render: {e}")))?;
        String::from_utf8(out.buf).map(Some).map_err(|_| TemplateError("render: output is not UTF-8".into()))
    }

    fn context(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Value {
        let msgs: Vec<Value> = messages.iter().map(|m| Value::from_object(MessageObj(m.clone()))).collect();
        let mut ctx: BTreeMap<String, Value> = BTreeMap::new();
        ctx.insert("messages".into(), Value::from(msgs));
        ctx.insert("add_generation_prompt".into(), Value::from(add_generation_prompt));
        ctx.insert("bos_token".into(), Value::from(self.bos_token.as_str()));
        ctx.insert("eos_token".into(), Value::from(self.eos_token.as_str()));
        Value::from(ctx)
    }
}

/// Collects render output up to `max` bytes, then fails every write (which ends the render).
struct BoundedWriter {
    buf: Vec<u8>,
    max: usize,
    over: bool,
}

impl std::io::Write for BoundedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len().saturating_add(data.len()) > self.max {
            self.over = true;
            return Err(std::io::Error::other("chat template output is over the limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A message as a template map whose keys iterate in HF order (`role`, `content`), so
/// `message | tojson` and `message.items()` match Python's dict order.
#[derive(Debug)]
struct MessageObj(ChatMessage);

impl Object for MessageObj {
    fn get_value(self: &Arc<Self>, key: &Value) -> Option<Value> {
        match key.as_str()? {
            "role" => Some(Value::from(self.0.role.as_str())),
            "content" => Some(Value::from(self.0.content.as_str())),
            _ => None,
        }
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Str(&["role", "content"])
    }
}

/// The chat template shipped in a Hugging Face folder: `chat_template.jinja`, else
/// `chat_template.json` (`{"chat_template": ...}`), else `tokenizer_config.json`'s
/// `chat_template` (a string, or a list of `{name, template}` from which "default" is taken).
/// `Ok(None)` when the folder has none.
pub fn load_hf_chat_template(dir: &Path) -> Result<Option<String>, TemplateError> {
    let read = |name: &str| -> Result<Option<String>, TemplateError> {
        let path = dir.join(name);
        if !path.is_file() {
            return Ok(None);
        }
        crate::error::read_text_file(&path, crate::error::MAX_SIDE_FILE)
            .map(Some)
            .map_err(|e| TemplateError(format!("{}: {e}", path.display())))
    };
    if let Some(src) = read("chat_template.jinja")? {
        return Ok(Some(src));
    }
    for file in ["chat_template.json", "tokenizer_config.json"] {
        let Some(text) = read(file)? else { continue };
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| TemplateError(format!("{file}: {e}")))?;
        match json.get("chat_template") {
            None | Some(serde_json::Value::Null) => continue,
            Some(serde_json::Value::String(s)) => return Ok(Some(s.clone())),
            Some(serde_json::Value::Array(list)) => {
                let default =
                    list.iter().find(|t| t.get("name").and_then(serde_json::Value::as_str) == Some("default"));
                return match default.and_then(|t| t.get("template")?.as_str()) {
                    Some(s) => Ok(Some(s.to_string())),
                    None => Err(TemplateError(format!("{file}: no \"default\" chat template"))),
                };
            }
            Some(_) => return Err(TemplateError(format!("{file}: bad chat_template value"))),
        }
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// Template globals and filters

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> Result<String, Error> {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    Ok(strftime(&fmt, secs))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// (year, month 1-12, day 1-31) from days since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Python-style `strftime` for a UTC timestamp (`%Y %y %m %d %e %j %H %I %M %S %p %a %A %b %B
/// %h %F %T %D %%`); unknown directives are copied through.
fn strftime(fmt: &str, secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (sod / 3600, (sod / 60) % 60, sod % 60);
    let wd = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let jan1 = days - (0..m - 1).map(|k| month_len(y, k + 1)).sum::<i64>() - (i64::from(d) - 1);
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(spec) = chars.next() else {
            out.push('%');
            break;
        };
        let h12 = if hh % 12 == 0 { 12 } else { hh % 12 };
        let piece = match spec {
            'Y' => y.to_string(),
            'y' => format!("{:02}", y.rem_euclid(100)),
            'm' => format!("{m:02}"),
            'd' => format!("{d:02}"),
            'e' => format!("{d:>2}"),
            'j' => format!("{:03}", days - jan1 + 1),
            'H' => format!("{hh:02}"),
            'I' => format!("{h12:02}"),
            'M' => format!("{mm:02}"),
            'S' => format!("{ss:02}"),
            'p' => (if hh < 12 { "AM" } else { "PM" }).to_string(),
            'a' => WEEKDAYS[wd][..3].to_string(),
            'A' => WEEKDAYS[wd].to_string(),
            'b' | 'h' => month[..3].to_string(),
            'B' => month.to_string(),
            'F' => format!("{y}-{m:02}-{d:02}"),
            'T' => format!("{hh:02}:{mm:02}:{ss:02}"),
            'D' => format!("{m:02}/{d:02}/{:02}", y.rem_euclid(100)),
            '%' => "%".to_string(),
            other => format!("%{other}"),
        };
        out.push_str(&piece);
    }
    out
}

fn month_len(y: i64, m: u32) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Widest `indent` of `tojson` and width or precision inside a `str.format` field that a
/// template may ask for (a hostile template's `indent=10**12` or `'{:>999999999999}'` would
/// otherwise allocate without bound, outside minijinja's fuel).
pub const MAX_TEMPLATE_WIDTH: usize = 1024;

/// minijinja-contrib's Python-compatible methods, with `str.format`'s field widths bounded by
/// [`MAX_TEMPLATE_WIDTH`].
fn bounded_pycompat(state: &mut minijinja::State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if method == "format"
        && let Some(f) = value.as_str()
        && let Some(w) = widest_format_number(f)
        && w > MAX_TEMPLATE_WIDTH
    {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("str.format width {w} is above {MAX_TEMPLATE_WIDTH}"),
        ));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// The largest number written inside the `{...}` fields of a format string (saturating), if any.
fn widest_format_number(f: &str) -> Option<usize> {
    let (mut depth, mut cur, mut best): (usize, Option<usize>, Option<usize>) = (0, None, None);
    // `{{` and `}}` outside a field are literal braces, not fields.
    let text = f.replace("{{", "").replace("}}", "");
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        match c.to_digit(10) {
            Some(d) if depth > 0 => cur = Some(cur.unwrap_or(0).saturating_mul(10).saturating_add(d as usize)),
            _ => {
                best = best.max(cur);
                cur = None;
            }
        }
    }
    best.max(cur)
}

/// `tojson(indent=None, sort_keys=False, ensure_ascii=False)` like HF's override (other
/// keyword arguments such as `separators` are accepted and ignored).
fn tojson(value: &Value, indent: Option<usize>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = indent.or(kwargs.get("indent")?);
    if let Some(n) = indent
        && n > MAX_TEMPLATE_WIDTH
    {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson indent {n} is above {MAX_TEMPLATE_WIDTH}"),
        ));
    }
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let opts = JsonOpts { indent, sort_keys: sort_keys.unwrap_or(false), ensure_ascii: ensure_ascii.unwrap_or(false) };
    let mut out = String::new();
    write_json(&mut out, value, &opts, 0)?;
    Ok(Value::from_safe_string(out))
}

struct JsonOpts {
    indent: Option<usize>,
    sort_keys: bool,
    ensure_ascii: bool,
}

fn write_json(out: &mut String, v: &Value, o: &JsonOpts, level: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            let s = v.to_string();
            out.push_str(match s.as_str() {
                "inf" => "Infinity",
                "-inf" => "-Infinity",
                "NaN" | "nan" => "NaN",
                _ => &s,
            });
        }
        ValueKind::String => write_json_str(out, v.as_str().unwrap_or_default(), o.ensure_ascii),
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if o.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            let mut items = Vec::with_capacity(keys.len());
            for k in keys {
                let mut s = String::new();
                write_json_str(&mut s, &k.to_string(), o.ensure_ascii);
                s.push_str(": ");
                write_json(&mut s, &v.get_item(&k)?, o, level + 1)?;
                items.push(s);
            }
            write_container(out, ('{', '}'), &items, o.indent, level);
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let mut items = Vec::new();
            for item in v.try_iter()? {
                let mut s = String::new();
                write_json(&mut s, &item, o, level + 1)?;
                items.push(s);
            }
            write_container(out, ('[', ']'), &items, o.indent, level);
        }
        _ => write_json_str(out, &v.to_string(), o.ensure_ascii),
    }
    Ok(())
}

/// Python `json.dumps` layout: `", "` separators inline, `","` + newline when indenting.
fn write_container(
    out: &mut String,
    (open, close): (char, char),
    items: &[String],
    indent: Option<usize>,
    level: usize,
) {
    out.push(open);
    if !items.is_empty() {
        match indent {
            None => out.push_str(&items.join(", ")),
            Some(n) => {
                let inner = format!("\n{}", " ".repeat(n * (level + 1)));
                out.push_str(&inner);
                out.push_str(&items.join(&format!(",{inner}")));
                out.push('\n');
                out.push_str(&" ".repeat(n * level));
            }
        }
    }
    out.push(close);
}

fn write_json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct's `tokenizer.chat_template` (real newlines inside the literals).
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    /// Meta-Llama-3-8B-Instruct's template.
    const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage { role: role.into(), content: content.into() }
    }

    fn render(src: &str, msgs: &[ChatMessage], add_gen: bool) -> Result<String, TemplateError> {
        ChatTemplate::new(src, Some("<s>".into()), Some("</s>".into()))?.render(msgs, add_gen)
    }

    #[test]
    fn smollm2_template_matches_reference_prompt() {
        let out = render(SMOLLM2, &[msg("user", "Name three primary colors.")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nName three primary colors.<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system = [msg("system", "S"), msg("user", "U")];
        assert_eq!(
            render(SMOLLM2, &with_system, false).unwrap(),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
        );
    }

    #[test]
    fn llama3_template() {
        let t = ChatTemplate::new(LLAMA3, Some("<|begin_of_text|>".into()), None).unwrap();
        let out = t.render(&[msg("system", " Be brief. "), msg("user", "Hi\n")], true).unwrap();
        assert_eq!(
            out,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
    }

    #[test]
    fn chatml_fallback() {
        let out = render(CHATML_TEMPLATE, &[msg("user", "hi")], true).unwrap();
        assert_eq!(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
        let out = render(CHATML_TEMPLATE, &[msg("user", "hi")], false).unwrap();
        assert_eq!(out, "<|im_start|>user\nhi<|im_end|>\n");
    }

    #[test]
    fn raise_exception_becomes_error() {
        let src = "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}[{{ m['content'] }}]{% endfor %}";
        let err = render(src, &[msg("system", "x")], false).unwrap_err();
        assert!(err.to_string().contains("System role not supported"), "{err}");
        assert_eq!(render(src, &[msg("user", "x")], false).unwrap(), "[x]");
    }

    #[test]
    fn python_methods() {
        let src = "{% for m in messages %}{{ m.content.strip() }}|{{ m['role'].startswith('us') }}|{{ m.content.split(',') | length }}{% for k, v in m.items() %}/{{ k }}{% endfor %};{% endfor %}";
        let out = render(src, &[msg("user", "  a,b \n")], false).unwrap();
        assert_eq!(out, "a,b|True|2/role/content;");
    }

    #[test]
    fn whitespace_control_and_lenient_undefined() {
        let src = "{% for m in messages %}\n  {% if true %}\n{{ m.role }}\n  {% endif %}\n{% endfor %}\n";
        assert_eq!(render(src, &[msg("user", "x")], false).unwrap(), "user\n");
        let src = "{{ foo }}|{% if foo %}x{% endif %}{% if messages[0].tool_calls is defined %}y{% endif %}|{{ bos_token }}{{ eos_token }}";
        assert_eq!(render(src, &[msg("user", "x")], false).unwrap(), "||<s></s>");
        assert!(ChatTemplate::new("{% if %}", None, None).is_err());
    }

    #[test]
    fn tojson_like_python() {
        let out = render("{{ messages[0] | tojson }}", &[msg("user", "hé \"q\"\n")], false);
        assert_eq!(out.unwrap(), r#"{"role": "user", "content": "hé \"q\"\n"}"#);
        let out = render("{{ {'a': [1, 2], 'b': none} | tojson(indent=2) }}", &[], false);
        assert_eq!(out.unwrap(), "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": null\n}");
        let out = render("{{ ['é', {}] | tojson(ensure_ascii=true, separators=none) }}", &[], false);
        assert_eq!(out.unwrap(), r#"["\u00e9", {}]"#);
        // A hostile indent or format width is an error, not an allocation without bound.
        let e = render("{{ messages | tojson(indent=1000000000000) }}", &[msg("user", "x")], false).unwrap_err();
        assert!(e.to_string().contains("tojson indent 1000000000000 is above 1024"), "{e}");
        let e = render("{{ '{:>999999999999}'.format('x') }}", &[], false).unwrap_err();
        assert!(e.to_string().contains("str.format width 999999999999 is above 1024"), "{e}");
        assert_eq!(render("{{ '{:>5}|{:<3}|'.format('ab', 'c') }}", &[], false).unwrap(), "   ab|c  |");
        assert_eq!(widest_format_number("a {:>12.3f} {0} 99999"), Some(12));
        assert_eq!(widest_format_number("no fields 12345"), None);
        assert_eq!(widest_format_number("{{\"max\": 2048}} {:>3}"), Some(3));
    }

    #[test]
    fn strftime_formats() {
        assert_eq!(strftime("%Y-%m-%d %H:%M:%S %a %b %j", 0), "1970-01-01 00:00:00 Thu Jan 001");
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %a %A %b %B %j %I %p %y %e %F %T %D %%", 1_709_298_309),
            "2024-03-01 13:05:09 Fri Friday Mar March 061 01 PM 24  1 2024-03-01 13:05:09 03/01/24 %"
        );
        assert_eq!(strftime("%j %a", 1_704_063_600), "365 Sun");
        assert_eq!(strftime("%F %a %j", -31_536_000), "1969-01-01 Wed 001");
        let today = render("{{ strftime_now('%d %b %Y') }}", &[], false).unwrap();
        assert_eq!(today.len(), 11, "{today}");
    }

    #[test]
    fn hostile_templates_are_bounded() {
        let t = ChatTemplate::new(
            "{% for i in range(100000) %}{% for m in messages %}{{ m.content }}{% endfor %}{% endfor %}",
            None,
            None,
        )
        .unwrap();
        let msgs = [msg("user", "0123456789")];
        // 1 MB of output: stops at the 4 KiB limit, long before it is built.
        assert_eq!(t.render_bounded(&msgs, true, 4096).unwrap(), None);
        let small = ChatTemplate::new("{{ messages[0].content }}!", None, None).unwrap();
        assert_eq!(small.render_bounded(&msgs, true, 11).unwrap().as_deref(), Some("0123456789!"));
        assert_eq!(small.render_bounded(&msgs, true, 10).unwrap(), None);
        assert_eq!(small.render_bounded(&[msg("user", &"x".repeat(100))], true, 50).unwrap(), None);
        // A loop nest that produces nothing but would run for 10^10 steps runs out of fuel.
        let spin = ChatTemplate::new(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            None,
            None,
        )
        .unwrap();
        let e = spin.render_bounded(&msgs, true, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("fuel"), "{e}");
        // String repetition past minijinja's limit is an error, not a 10 GB string.
        let rep = ChatTemplate::new("{{ 'x' * 10000000000 }}", None, None).unwrap();
        assert!(rep.render_bounded(&msgs, true, 1 << 20).is_err());
    }

    #[test]
    fn loads_templates_from_hf_folder() {
        let dir = std::env::temp_dir().join(format!("lserve-chat-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(load_hf_chat_template(&dir).unwrap(), None);
        let cfg = dir.join("tokenizer_config.json");
        std::fs::write(&cfg, r#"{"chat_template": "plain"}"#).unwrap();
        assert_eq!(load_hf_chat_template(&dir).unwrap().as_deref(), Some("plain"));
        let list =
            r#"{"chat_template": [{"name": "tool_use", "template": "t"}, {"name": "default", "template": "d"}]}"#;
        std::fs::write(&cfg, list).unwrap();
        assert_eq!(load_hf_chat_template(&dir).unwrap().as_deref(), Some("d"));
        std::fs::write(&cfg, r#"{"chat_template": [{"name": "x", "template": "t"}]}"#).unwrap();
        assert!(load_hf_chat_template(&dir).is_err());
        std::fs::write(dir.join("chat_template.jinja"), "from file").unwrap();
        assert_eq!(load_hf_chat_template(&dir).unwrap().as_deref(), Some("from file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
