//! The optional LLM classifier: any OpenAI-compatible chat completions
//! endpoint (a local model server such as llama.cpp's, vLLM or Ollama),
//! asked for strict JSON that names 0–3 of the taxonomy's skills with a
//! confidence each, and a new skill when none fits. The answer is checked
//! against the schema it was asked for (`Answer`, unknown fields refused)
//! and against the taxonomy; anything else is a failure, and the caller
//! falls back to the local classifier and retries later: a tool is never
//! left unclassified because the LLM is down.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

use crate::model::skill::{MAX_SKILLS, SkillAssignment, choose_skills};
use crate::model::{Skill, ToolRecord};

/// Characters of a tool's description sent (a prompt is not a dump).
const DESCRIPTION_BUDGET: usize = 1_000;
/// The largest answer read from the chat endpoint (one classification is a
/// few hundred bytes; a model that rambles stays far below this).
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Where the classifier is and how long it may take.
#[derive(Debug, Clone)]
pub struct LlmSettings {
    /// The API base (`http://127.0.0.1:8080/v1`) or the full
    /// `…/chat/completions` URL.
    pub url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("the classifier at {url} did not answer within {after:?}")]
    Timeout { url: String, after: Duration },
    #[error("cannot reach the classifier at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the classifier answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the classifier's answer does not follow the schema: {0}")]
    Invalid(String),
}

/// What the model must answer, and the JSON Schema it is asked to answer
/// by (`answer_schema`): what the parser accepts is what the schema says.
/// The schema suits an OpenAI `strict` endpoint: every property required
/// (a field that may be absent is a nullable one instead), no other
/// properties, and subschemas inline.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(description = "", transform = every_property_required)]
struct Answer {
    #[schemars(length(max = MAX_SKILLS))]
    skills: Vec<AnswerSkill>,
    /// Null when a skill fits (serde reads an absent one as null too).
    #[schemars(description = "")]
    new_skill: Option<NewSkill>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
struct AnswerSkill {
    // Its `enum` (the taxonomy's ids) is set per request.
    skill_id: String,
    #[schemars(range(min = 0, max = 1), transform = without_format)]
    confidence: f64,
}

#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(inline)]
pub struct NewSkill {
    pub name: String,
    pub description: String,
}

/// Strict mode wants every property in `required`: a field that may be
/// absent is a nullable one (`Option`), which schemars leaves out of it.
fn every_property_required(schema: &mut schemars::Schema) {
    let names: Vec<Value> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| properties.keys().cloned().map(Value::from).collect())
        .unwrap_or_default();
    schema.insert("required".into(), Value::Array(names));
}

/// Strict mode knows no `format` for a number (schemars says `double`).
fn without_format(schema: &mut schemars::Schema) {
    schema.remove("format");
}

/// A classification from the LLM.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmClassification {
    pub skills: Vec<SkillAssignment>,
    /// The skill the model would add when none fits.
    pub new_skill: Option<NewSkill>,
}

#[derive(Debug, Clone)]
pub struct LlmClassifier {
    http: reqwest::Client,
    endpoint: String,
    settings: LlmSettings,
}

impl LlmClassifier {
    pub fn new(settings: LlmSettings) -> LlmClassifier {
        let trimmed = settings.url.trim_end_matches('/');
        let endpoint = if trimmed.ends_with("/chat/completions") {
            trimmed.to_owned()
        } else {
            format!("{trimmed}/chat/completions")
        };
        let http = crate::http_client::client(settings.timeout);
        LlmClassifier {
            http,
            endpoint,
            settings,
        }
    }

    /// Names the classifier in a classification's `by`.
    pub fn id(&self) -> String {
        format!("llm:{}", self.settings.model)
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Asks for one tool's skills among `skills` (the visible taxonomy).
    pub async fn classify(
        &self,
        skills: &[Skill],
        tool: &ToolRecord,
    ) -> Result<LlmClassification, LlmError> {
        let body = request_body(&self.settings.model, skills, tool);
        let mut request = self
            .http
            .post(&self.endpoint)
            .timeout(self.settings.timeout)
            .json(&body);
        if let Some(key) = &self.settings.api_key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|err| self.transport(&err))?;
        let status = response.status();
        // A chat completion for one tool is a few hundred bytes; a body
        // past the cap is refused as it streams, never held whole.
        let body = crate::http_client::bounded_body(response, MAX_ANSWER_BYTES)
            .await
            .map_err(|reason| LlmError::Unreachable {
                url: self.endpoint.clone(),
                reason,
            })?;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            return Err(LlmError::Status {
                status: status.as_u16(),
                body: text.chars().take(300).collect(),
            });
        }
        parse_completion(&text, skills)
    }

    fn transport(&self, err: &reqwest::Error) -> LlmError {
        if err.is_timeout() {
            LlmError::Timeout {
                url: self.endpoint.clone(),
                after: self.settings.timeout,
            }
        } else {
            LlmError::Unreachable {
                url: self.endpoint.clone(),
                reason: err.to_string(),
            }
        }
    }
}

/// The chat request: the taxonomy and the rules in the system message, the
/// tool in the user message, strict JSON asked for by schema.
pub fn request_body(model: &str, skills: &[Skill], tool: &ToolRecord) -> Value {
    let taxonomy: Vec<String> = skills
        .iter()
        .map(|s| format!("- {}: {} — {}", s.id, s.name, s.description))
        .collect();
    let system = format!(
        "You classify tools of MCP servers into skills. Skills:\n{}\n\n\
         Answer with JSON only: up to {MAX_SKILLS} skills from the list that describe what the \
         tool does, most fitting first, each with a confidence between 0 and 1. If no skill \
         fits, answer an empty list and propose a new skill (name and one-sentence description) \
         in new_skill; otherwise new_skill is null.",
        taxonomy.join("\n")
    );
    let description: String = tool
        .description
        .as_deref()
        .unwrap_or_default()
        .chars()
        .take(DESCRIPTION_BUDGET)
        .collect();
    let user = format!(
        "Server: {}\nTool: {}\nDescription: {}",
        tool.server_name, tool.original_name, description
    );
    let ids: Vec<&str> = skills.iter().map(|s| s.id.as_str()).collect();
    json!({
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": user},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "tool_classification",
                "strict": true,
                "schema": answer_schema(&ids),
            },
        },
    })
}

/// The schema of `Answer`, inline (no `$ref`), with the skill ids it may
/// name.
fn answer_schema(ids: &[&str]) -> Value {
    let mut generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.subschema_for::<Answer>().to_value();
    if let Some(skill_id) = schema.pointer_mut("/properties/skills/items/properties/skill_id")
        && let Some(skill_id) = skill_id.as_object_mut()
    {
        skill_id.insert("enum".into(), json!(ids));
    }
    schema
}

/// Reads a chat completion and checks its content against the schema and
/// the taxonomy.
pub fn parse_completion(text: &str, skills: &[Skill]) -> Result<LlmClassification, LlmError> {
    let completion: Value =
        serde_json::from_str(text).map_err(|err| LlmError::Invalid(format!("not JSON: {err}")))?;
    let content = completion
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| LlmError::Invalid("no choices[0].message.content".into()))?;
    // Some servers wrap JSON in a code fence even when asked not to.
    let content = content
        .trim()
        .trim_start_matches("```json")
        .trim_start_matches("```")
        .trim_end_matches("```")
        .trim();
    let answer: Answer = serde_json::from_str(content)
        .map_err(|err| LlmError::Invalid(format!("{err} in {content:.200}")))?;
    if answer.skills.len() > MAX_SKILLS {
        return Err(LlmError::Invalid(format!(
            "{} skills (at most {MAX_SKILLS})",
            answer.skills.len()
        )));
    }
    let mut chosen = Vec::new();
    for skill in answer.skills {
        if !skills.iter().any(|s| s.id == skill.skill_id) {
            return Err(LlmError::Invalid(format!(
                "unknown skill '{}'",
                skill.skill_id
            )));
        }
        if !(0.0..=1.0).contains(&skill.confidence) {
            return Err(LlmError::Invalid(format!(
                "confidence {} of '{}' is outside 0–1",
                skill.confidence, skill.skill_id
            )));
        }
        chosen.push(SkillAssignment {
            skill_id: skill.skill_id,
            confidence: skill.confidence as f32,
        });
    }
    Ok(LlmClassification {
        skills: choose_skills(chosen),
        new_skill: answer.new_skill.filter(|n| !n.name.trim().is_empty()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skills() -> Vec<Skill> {
        ["email", "files"]
            .iter()
            .map(|id| Skill {
                id: (*id).into(),
                name: (*id).into(),
                description: "d".into(),
                examples: vec![],
                builtin: true,
                hidden: false,
            })
            .collect()
    }

    fn completion(content: &str) -> String {
        json!({"choices": [{"message": {"role": "assistant", "content": content}}]}).to_string()
    }

    #[test]
    fn a_valid_answer_is_kept_above_the_bar_and_ordered() {
        let answer = parse_completion(
            &completion(r#"{"skills": [{"skill_id": "files", "confidence": 0.4}, {"skill_id": "email", "confidence": 0.9}], "new_skill": null}"#),
            &skills(),
        )
        .unwrap();
        assert_eq!(answer.skills.len(), 1);
        assert_eq!(answer.skills[0].skill_id, "email");
        assert_eq!(answer.new_skill, None);
        let fenced = parse_completion(
            &completion("```json\n{\"skills\": [], \"new_skill\": {\"name\": \"Weather\", \"description\": \"forecasts\"}}\n```"),
            &skills(),
        )
        .unwrap();
        assert_eq!(fenced.new_skill.unwrap().name, "Weather");
    }

    #[test]
    fn answers_off_the_schema_or_the_taxonomy_are_refused() {
        for content in [
            "not json",
            r#"{"skills": [{"skill_id": "weather", "confidence": 0.9}], "new_skill": null}"#,
            r#"{"skills": [{"skill_id": "email", "confidence": 1.5}], "new_skill": null}"#,
            r#"{"skills": [{"skill_id": "email"}], "new_skill": null}"#,
            r#"{"skills": [], "new_skill": null, "extra": 1}"#,
            r#"{"skills": [], "new_skill": {"name": "Weather"}}"#,
            r#"{"skills": [{"skill_id": "email", "confidence": 0.9}, {"skill_id": "email", "confidence": 0.9}, {"skill_id": "files", "confidence": 0.9}, {"skill_id": "files", "confidence": 0.9}], "new_skill": null}"#,
        ] {
            assert!(
                matches!(
                    parse_completion(&completion(content), &skills()),
                    Err(LlmError::Invalid(_))
                ),
                "{content}"
            );
        }
        assert!(parse_completion("{}", &skills()).is_err());
    }

    #[test]
    fn the_request_asks_for_strict_json_over_the_taxonomy() {
        let tool: ToolRecord = serde_json::from_value(json!({
            "id": "mail.send", "server_id": "00000000-0000-0000-0000-000000000001",
            "server_name": "mail", "original_name": "send", "wire_name": "mail__send",
            "rejected": null, "description": "Send an email", "definition": {},
            "definition_hash": "h", "is_external": true, "is_classified": false,
            "discovered_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"
        }))
        .unwrap();
        let body = request_body("m", &skills(), &tool);
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        let ids = &body["response_format"]["json_schema"]["schema"]["properties"]["skills"]["items"]
            ["properties"]["skill_id"]["enum"];
        assert_eq!(ids, &json!(["email", "files"]));
        assert!(
            body["messages"][1]["content"]
                .as_str()
                .unwrap()
                .contains("Send an email")
        );
    }

    #[test]
    fn the_answer_schema_is_what_a_strict_endpoint_accepts() {
        let schema = answer_schema(&["email", "files"]);
        // Strict mode: every object lists all its properties as required
        // and allows no others.
        for (path, required) in [
            ("", json!(["skills", "new_skill"])),
            (
                "/properties/skills/items",
                json!(["skill_id", "confidence"]),
            ),
        ] {
            let object = schema.pointer(path).unwrap();
            assert_eq!(object["required"], required, "{path}");
            assert_eq!(object["additionalProperties"], false, "{path}");
        }
        let new_skill = &schema["properties"]["new_skill"];
        let object = new_skill["anyOf"]
            .as_array()
            .and_then(|a| a.iter().find(|s| s["type"] == "object"))
            .unwrap_or(new_skill);
        assert_eq!(object["required"], json!(["name", "description"]));
        assert_eq!(object["additionalProperties"], false);
        assert!(new_skill.to_string().contains("null"), "{new_skill}");
        let skills = &schema["properties"]["skills"];
        assert_eq!(skills["maxItems"], MAX_SKILLS);
        let skill = &skills["items"]["properties"];
        assert_eq!(skill["skill_id"]["enum"], json!(["email", "files"]));
        assert_eq!(skill["confidence"]["minimum"], 0);
        assert_eq!(skill["confidence"]["maximum"], 1);
        assert!(!schema.to_string().contains("$ref"));
    }
}
