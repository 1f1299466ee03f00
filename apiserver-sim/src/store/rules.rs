//! A CRD schema's `x-kubernetes-validations`: CEL rules about `self` (and `oldSelf`, on an update), evaluated with the `cel` crate as kube-apiserver evaluates them.
//!
//! Each rule is a CEL expression that must be true. A failing rule is a field
//! error at the schema's path (or the rule's `fieldPath`), worded by its
//! `message`, its `messageExpression`, or `failed rule: RULE`, with the
//! rule's `reason` (`FieldValueInvalid` unless it names another). A rule that
//! reads `oldSelf` is a transition rule: checked only when there is an old
//! value to compare with.
//!
//! kube-apiserver refuses a CRD whose rules do not compile, and adds
//! Kubernetes' own CEL libraries (`quantity()`, `url()`, `isIP()`, …) to the
//! standard ones. A rule that does not compile here, calls a function this
//! environment lacks, or answers no boolean is therefore not enforced
//! (logged at debug level) rather than failing writes a cluster takes.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::{Context, Env, Program};
use serde_json::Value;

use crate::status::FieldError;

/// The CEL environment of the rules: the standard library and the string,
/// list and math extensions Kubernetes' CEL libraries share with it.
fn environment() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    Arc::clone(ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        for extension in [
            cel::extensions::strings as fn(&mut Env) -> _,
            cel::extensions::lists,
            cel::extensions::math,
        ] {
            if let Err(error) = env.add_extension(extension) {
                tracing::warn!(%error, "a CEL extension was not added");
            }
        }
        Arc::new(env)
    }))
}

/// A JSON value as CEL sees it: integers as `int`, other numbers as
/// `double`, objects as maps.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(flag) => cel::Value::Bool(*flag),
        Value::Number(number) => match number.as_i64() {
            Some(integer) => cel::Value::Int(integer),
            None => cel::Value::Float(number.as_f64().unwrap_or_default()),
        },
        Value::String(text) => cel::Value::String(Arc::new(text.clone())),
        Value::Array(items) => cel::Value::from(items.iter().map(to_cel).collect::<Vec<_>>()),
        Value::Object(fields) => cel::Value::from(
            fields
                .iter()
                .map(|(name, field)| (name.clone(), to_cel(field)))
                .collect::<HashMap<String, cel::Value>>(),
        ),
    }
}

/// Checks the rules of `schema` on `value` at `path`; `old` is the value
/// before an update.
pub(super) fn check(schema: &Value, value: &Value, old: Option<&Value>, path: &str, errors: &mut Vec<FieldError>) {
    let Some(rules) = schema["x-kubernetes-validations"].as_array() else {
        return;
    };
    let env = environment();
    for rule in rules {
        let Some(source) = rule["rule"].as_str() else {
            continue;
        };
        let Ok(program) = env.compile(source) else {
            tracing::debug!(rule = source, "a CEL rule that does not compile is not enforced");
            continue;
        };
        let transition = program.references().has_variable("oldSelf");
        if transition && old.is_none() {
            continue;
        }
        let mut context = Context::with_env(Arc::clone(&env));
        context.add_variable_from_value("self", to_cel(value));
        if let Some(old) = old {
            context.add_variable_from_value("oldSelf", to_cel(old));
        }
        let passed = match program.execute(&context) {
            Ok(cel::Value::Bool(passed)) => passed,
            other => {
                tracing::debug!(rule = source, answer = ?other, "a CEL rule that answers no boolean is not enforced");
                continue;
            }
        };
        if passed {
            continue;
        }
        let message = message(rule, &context, source);
        let field = match rule["fieldPath"].as_str() {
            Some(relative) => format!("{path}{relative}"),
            None => path.to_owned(),
        };
        errors.push(match rule["reason"].as_str() {
            Some("FieldValueRequired") => FieldError::required(&field, &message),
            Some("FieldValueForbidden") => FieldError::forbidden(&field, &message),
            Some("FieldValueDuplicate") => {
                FieldError::duplicate(&field, &format!("{:?}", super::schema::type_of(value)))
            }
            _ => FieldError::invalid(&field, &format!("{:?}", super::schema::type_of(value)), &message),
        });
    }
}

/// A failed rule's message: its `messageExpression`'s answer, its
/// `message`, or `failed rule: RULE`.
fn message(rule: &Value, context: &Context<'_, '_>, source: &str) -> String {
    if let Some(expression) = rule["messageExpression"].as_str()
        && let Ok(program) = Program::compile(expression)
        && let Ok(cel::Value::String(text)) = program.execute(context)
        && !text.is_empty()
    {
        return text.to_string();
    }
    match rule["message"].as_str() {
        Some(message) if !message.is_empty() => message.to_owned(),
        _ => format!("failed rule: {source}"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_failing_rule_is_reported_with_its_message_and_a_transition_rule_needs_an_old_value() {
        let schema = json!({"x-kubernetes-validations": [
            {"rule": "self.replicas <= self.maxReplicas", "message": "replicas may not exceed maxReplicas"},
            {"rule": "self.name.startsWith('web-')"},
            {"rule": "self.maxReplicas >= oldSelf.maxReplicas", "messageExpression": "'maxReplicas may not shrink from ' + string(oldSelf.maxReplicas)"},
        ]});
        let mut errors = Vec::new();
        let value = json!({"replicas": 5, "maxReplicas": 3, "name": "db"});
        check(&schema, &value, None, "spec", &mut errors);
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "spec: Invalid value: \"object\": replicas may not exceed maxReplicas",
                "spec: Invalid value: \"object\": failed rule: self.name.startsWith('web-')",
            ]
        );
        let mut errors = Vec::new();
        let old = json!({"replicas": 1, "maxReplicas": 4, "name": "web-a"});
        let value = json!({"replicas": 1, "maxReplicas": 3, "name": "web-a"});
        check(&schema, &value, Some(&old), "spec", &mut errors);
        assert_eq!(
            errors[0].to_string(),
            "spec: Invalid value: \"object\": maxReplicas may not shrink from 4"
        );
    }
}
