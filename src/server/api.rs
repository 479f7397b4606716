//! OpenAI request bodies and their validation into engine requests. Unknown fields are ignored
//! (clients send many); fields this server cannot honour are refused with a 400 naming them
//! rather than silently ignored (`n` > 1, `logprobs`, penalties, `logit_bias`, `echo`, `suffix`,
//! `best_of` > 1, tools, non-text response formats). Ranges follow OpenAI's API reference:
//! `temperature` 0..=2, `top_p` in (0, 1], `max_tokens` >= 1, penalties -2..=2, at most 4 `stop`
//! strings of at most 1 KiB; `top_k` (vLLM's extension) is -1, 0 (both: off) or 1..=vocabulary size. A field of the
//! wrong type is a 400 whose `param` names it.

use serde::Deserialize;
use serde_json::Value;

use super::error::ApiError;
use crate::chat::ChatMessage;
use crate::sampling::SamplingParams;

/// `"text"`, `["text"]`, `[ids]` or `[[ids]]` (one prompt per request).
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum PromptInput {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<i64>),
    IdLists(Vec<Vec<i64>>),
}

/// `"s"` or `["s", ...]`.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum StopInput {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize, Debug, Default)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

/// Longest stop string accepted, bytes.
pub const MAX_STOP_BYTES: usize = 1024;

/// Sampling and stopping fields shared by both endpoints.
#[derive(Deserialize, Debug, Default)]
pub struct Common {
    pub model: Option<String>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub seed: Option<i64>,
    pub n: Option<i64>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub stop: Option<StopInput>,
    pub stop_token_ids: Option<Vec<i64>>,
    pub ignore_eos: Option<bool>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    pub repetition_penalty: Option<f64>,
    pub logit_bias: Option<Value>,
    pub logprobs: Option<Value>,
    pub best_of: Option<i64>,
}

#[derive(Deserialize, Debug)]
pub struct CompletionRequest {
    pub prompt: PromptInput,
    pub echo: Option<bool>,
    pub suffix: Option<String>,
    #[serde(flatten)]
    pub common: Common,
}

/// Message content: a string, or a list of parts of which only `{"type": "text"}` is accepted.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize, Debug)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

#[derive(Deserialize, Debug)]
pub struct Message {
    pub role: String,
    pub content: Option<Content>,
}

#[derive(Deserialize, Debug)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub max_completion_tokens: Option<i64>,
    pub top_logprobs: Option<i64>,
    pub tools: Option<Vec<Value>>,
    pub response_format: Option<Value>,
    pub add_generation_prompt: Option<bool>,
    #[serde(flatten)]
    pub common: Common,
}

/// Sampling, stop and length settings once validated.
#[derive(Debug, Clone)]
pub struct Validated {
    pub max_tokens: Option<usize>,
    pub sampling: SamplingParams,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub stream: bool,
    pub include_usage: bool,
}

fn nonzero(v: Option<f64>) -> bool {
    v.is_some_and(|x| x != 0.0)
}

fn truthy(v: &Option<Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(_) => true,
    }
}

/// Parse a request body as `T`. Not UTF-8, not JSON or not an object: 400 for the request as a
/// whole; a field of the wrong type (or a missing required one): 400 naming that field. `fillers`
/// are valid stand-ins for `T`'s required fields, used to find which field is at fault.
pub fn parse_body<T: serde::de::DeserializeOwned>(bytes: &[u8], fillers: &[(&str, Value)]) -> Result<T, ApiError> {
    if std::str::from_utf8(bytes).is_err() {
        return Err(ApiError::invalid("the request body is not valid UTF-8", None));
    }
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| ApiError::invalid(format!("malformed request body: {e}"), None))?;
    let Value::Object(obj) = &v else {
        return Err(ApiError::invalid("the request body must be a JSON object", None));
    };
    let err = match serde_json::from_value::<T>(v.clone()) {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    for (k, val) in obj {
        let mut probe: serde_json::Map<String, Value> =
            fillers.iter().map(|(f, x)| (f.to_string(), x.clone())).collect();
        probe.insert(k.clone(), val.clone());
        if let Err(e) = serde_json::from_value::<T>(Value::Object(probe)) {
            return Err(ApiError::invalid(format!("`{k}`: {e}"), Some(k)));
        }
    }
    let missing = fillers.iter().map(|(f, _)| *f).find(|f| !obj.contains_key(*f));
    Err(ApiError::invalid(format!("invalid request body: {err}"), missing))
}

fn range_error(name: &str, want: &str, got: f64) -> ApiError {
    ApiError::invalid(format!("`{name}` must be {want}, got {got}"), Some(name))
}

impl Common {
    /// Validate everything but the model and the prompt; `max_tokens` may come from
    /// `max_completion_tokens` (chat). `seed` None draws a fresh one; `vocab_size` bounds `top_k`.
    /// Long (about 85 lines): one check per request field, each with its own error naming it.
    pub fn validate(&self, max_tokens: Option<i64>, fresh_seed: u64, vocab_size: usize) -> Result<Validated, ApiError> {
        if let Some(n) = self.n
            && n != 1
        {
            return Err(ApiError::invalid(format!("`n` must be 1 (got {n}): one choice per request"), Some("n")));
        }
        if let Some(b) = self.best_of
            && b != 1
        {
            return Err(ApiError::unsupported("best_of", "one candidate per request"));
        }
        if truthy(&self.logprobs) {
            return Err(ApiError::unsupported("logprobs", "log-probabilities are not returned"));
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if let Some(x) = v
                && !(-2.0..=2.0).contains(&x)
            {
                return Err(range_error(name, "between -2 and 2", x));
            }
            if nonzero(v) {
                return Err(ApiError::unsupported(name, "penalties are not implemented"));
            }
        }
        if self.repetition_penalty.is_some_and(|r| r != 1.0) {
            return Err(ApiError::unsupported("repetition_penalty", "penalties are not implemented"));
        }
        if matches!(&self.logit_bias, Some(Value::Object(m)) if !m.is_empty()) {
            return Err(ApiError::unsupported("logit_bias", "logit biases are not implemented"));
        }
        let max_tokens = match max_tokens {
            None => None,
            Some(m) if m < 1 => {
                return Err(ApiError::invalid(format!("max_tokens must be at least 1, got {m}"), Some("max_tokens")));
            }
            Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
        };
        let temperature = self.temperature.unwrap_or(1.0);
        if !(0.0..=2.0).contains(&temperature) {
            return Err(range_error("temperature", "between 0 and 2", temperature));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(range_error("top_p", "above 0 and at most 1", top_p));
        }
        let top_k = match self.top_k.unwrap_or(0) {
            -1 => 0,
            k if k < -1 || k as u64 > vocab_size as u64 => {
                return Err(ApiError::invalid(
                    format!("`top_k` must be -1 or 0 (off) or between 1 and the vocabulary size {vocab_size}, got {k}"),
                    Some("top_k"),
                ));
            }
            k => k as usize,
        };
        let stop = match &self.stop {
            None => vec![],
            Some(StopInput::One(s)) => vec![s.clone()],
            Some(StopInput::Many(v)) => v.clone(),
        };
        let stop: Vec<String> = stop.into_iter().filter(|s| !s.is_empty()).collect();
        if stop.len() > 4 {
            return Err(ApiError::invalid(format!("at most 4 stop strings, got {}", stop.len()), Some("stop")));
        }
        // Each generated token rescans the text for every stop string, on the engine's thread.
        if let Some(s) = stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
            return Err(ApiError::invalid(
                format!("a stop string is at most {MAX_STOP_BYTES} bytes, got {}", s.len()),
                Some("stop"),
            ));
        }
        let mut stop_token_ids = Vec::new();
        for &t in self.stop_token_ids.iter().flatten() {
            stop_token_ids.push(
                u32::try_from(t)
                    .map_err(|_| ApiError::invalid(format!("bad stop token id {t}"), Some("stop_token_ids")))?,
            );
        }
        let sampling = SamplingParams {
            temperature: temperature as f32,
            top_k,
            // A positive top_p below f32's range (1e-87 is valid JSON and above 0) keeps the
            // smallest positive normal f32 rather than rounding to 0, which the sampler refuses.
            top_p: (top_p as f32).max(f32::MIN_POSITIVE),
            seed: self.seed.map_or(fresh_seed, |s| s as u64),
        };
        Ok(Validated {
            max_tokens,
            sampling,
            stop,
            stop_token_ids,
            ignore_eos: self.ignore_eos.unwrap_or(false),
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
        })
    }
}

impl CompletionRequest {
    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        if self.echo == Some(true) {
            return Err(ApiError::unsupported("echo", "the prompt is not echoed"));
        }
        if self.suffix.as_ref().is_some_and(|s| !s.is_empty()) {
            return Err(ApiError::unsupported("suffix", "insertion is not implemented"));
        }
        Ok(())
    }
}

/// The single prompt of a completion request: text or token ids.
pub enum Prompt {
    Text(String),
    Ids(Vec<u32>),
}

pub fn single_prompt(p: PromptInput) -> Result<Prompt, ApiError> {
    let one = |n: usize| {
        if n == 1 {
            Ok(())
        } else {
            Err(ApiError::invalid(format!("exactly one prompt per request, got {n}"), Some("prompt")))
        }
    };
    let ids = |v: Vec<i64>| -> Result<Vec<u32>, ApiError> {
        v.into_iter()
            .map(|t| u32::try_from(t).map_err(|_| ApiError::invalid(format!("bad token id {t}"), Some("prompt"))))
            .collect()
    };
    match p {
        PromptInput::Text(s) => Ok(Prompt::Text(s)),
        PromptInput::Texts(mut v) => one(v.len()).map(|_| Prompt::Text(v.remove(0))),
        PromptInput::Ids(v) => Ok(Prompt::Ids(ids(v)?)),
        PromptInput::IdLists(mut v) => {
            one(v.len())?;
            Ok(Prompt::Ids(ids(v.remove(0))?))
        }
    }
}

impl ChatRequest {
    pub fn check_unsupported(&self) -> Result<(), ApiError> {
        if self.tools.as_ref().is_some_and(|t| !t.is_empty()) {
            return Err(ApiError::unsupported("tools", "tool calling is not implemented"));
        }
        if let Some(n) = self.top_logprobs
            && !(0..=20).contains(&n)
        {
            return Err(range_error("top_logprobs", "between 0 and 20", n as f64));
        }
        if self.top_logprobs.is_some_and(|n| n > 0) {
            return Err(ApiError::unsupported("top_logprobs", "log-probabilities are not returned"));
        }
        if let Some(f) = &self.response_format
            && f.get("type").and_then(Value::as_str).is_some_and(|t| t != "text")
        {
            return Err(ApiError::unsupported("response_format", "only {\"type\": \"text\"}"));
        }
        Ok(())
    }

    /// The messages as the chat template takes them.
    pub fn messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::invalid("`messages` must not be empty", Some("messages")));
        }
        let mut out = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let param = format!("messages[{i}]");
            if !matches!(m.role.as_str(), "system" | "user" | "assistant" | "developer" | "tool") {
                return Err(ApiError::invalid(format!("unknown role `{}`", m.role), Some(&param)));
            }
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(parts)) => {
                    let mut s = String::new();
                    for p in parts {
                        match (p.kind.as_str(), &p.text) {
                            ("text", Some(t)) => s.push_str(t),
                            (k, _) => {
                                return Err(ApiError::invalid(
                                    format!("content part of type `{k}` is not supported (text only)"),
                                    Some(&param),
                                ));
                            }
                        }
                    }
                    s
                }
            };
            let role = if m.role == "developer" { "system".to_string() } else { m.role.clone() };
            out.push(ChatMessage { role, content });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn common(v: serde_json::Value) -> Result<Validated, ApiError> {
        serde_json::from_value::<Common>(v).unwrap().validate(None, 7, 1000)
    }

    #[test]
    fn openai_ranges_name_the_field() {
        for (body, param) in [
            (serde_json::json!({"temperature": 1e9}), "temperature"),
            (serde_json::json!({"temperature": 2.01}), "temperature"),
            (serde_json::json!({"top_p": 1.5}), "top_p"),
            (serde_json::json!({"top_p": -0.1}), "top_p"),
            (serde_json::json!({"top_k": 1001}), "top_k"),
            (serde_json::json!({"top_k": -2}), "top_k"),
            (serde_json::json!({"presence_penalty": 3}), "presence_penalty"),
            (serde_json::json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
            (serde_json::json!({"stop": ["x".repeat(MAX_STOP_BYTES + 1)]}), "stop"),
        ] {
            let e = common(body.clone()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
        assert_eq!(
            common(serde_json::json!({"temperature": 2, "top_k": 1000, "top_p": 1})).unwrap().sampling.top_k,
            1000
        );
    }

    #[test]
    fn wrong_types_name_the_field() {
        let fill = [("prompt", serde_json::json!(""))];
        for (body, param) in [
            (r#"{"prompt": "x", "temperature": "hot"}"#, Some("temperature")),
            (r#"{"prompt": "x", "max_tokens": 1.5}"#, Some("max_tokens")),
            (r#"{"prompt": 5}"#, Some("prompt")),
            (r#"{"stream": "yes", "prompt": "x"}"#, Some("stream")),
            (r#"{"max_tokens": 5}"#, Some("prompt")),
            (r#"[1, 2]"#, None),
            (r#"{"prompt": "#, None),
        ] {
            let e = parse_body::<CompletionRequest>(body.as_bytes(), &fill).unwrap_err();
            assert_eq!(e.param.as_deref(), param, "{body}: {}", e.message);
        }
        assert!(parse_body::<CompletionRequest>(br#"{"prompt": "x", "foo": {}}"#, &fill).is_ok());
    }

    #[test]
    fn defaults_and_refusals() {
        let v = common(serde_json::json!({})).unwrap();
        assert_eq!((v.sampling.temperature, v.sampling.top_p, v.sampling.seed), (1.0, 1.0, 7));
        assert!(!v.stream && v.stop.is_empty());
        let v = common(serde_json::json!({"stop": "x", "top_k": -1, "seed": 3, "stream": true})).unwrap();
        assert_eq!((v.stop, v.sampling.top_k, v.sampling.seed, v.stream), (vec!["x".to_string()], 0, 3, true));
        assert_eq!(common(serde_json::json!({"n": 2})).unwrap_err().param.as_deref(), Some("n"));
        assert!(common(serde_json::json!({"logprobs": 2})).is_err());
        assert!(common(serde_json::json!({"logprobs": false})).is_ok());
        assert!(common(serde_json::json!({"temperature": -1})).is_err());
        assert!(common(serde_json::json!({"top_p": 0})).is_err());
        assert!(common(serde_json::json!({"top_p": 1.2e-87})).unwrap().sampling.top_p > 0.0);
        assert!(common(serde_json::json!({"presence_penalty": 0.5})).is_err());
        let c: Common = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(c.validate(Some(-5), 0, 10).is_err());
        assert!(c.validate(Some(0), 0, 10).is_err());
        assert_eq!(c.validate(Some(1 << 40), 0, 10).unwrap().max_tokens, Some(1 << 40));
    }

    #[test]
    fn prompts() {
        let p: PromptInput = serde_json::from_value(serde_json::json!([[1, 2, 3]])).unwrap();
        assert!(matches!(single_prompt(p), Ok(Prompt::Ids(v)) if v == [1, 2, 3]));
        let p: PromptInput = serde_json::from_value(serde_json::json!(["a", "b"])).unwrap();
        assert!(single_prompt(p).is_err());
        let p: PromptInput = serde_json::from_value(serde_json::json!([-1])).unwrap();
        assert!(single_prompt(p).is_err());
    }
}
