//! What AWS authorizes a request as, and whether a policy allows it: the
//! IAM test reads every request the fault proxy saw and checks each one
//! against `kcl-host iam-policy`'s output.

use serde_json::Value;

/// One IAM action on one resource that a request needs.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Authorization {
    /// `dynamodb:PutItem`, `kinesis:GetRecords`.
    pub action: String,
    /// A table or stream name as the request gave it, or an ARN; `None`
    /// when the request names none (a shard iterator or a page token
    /// stands for the stream, as in `GetRecords`).
    pub resource: Option<String>,
}

/// The authorizations of a request with this `X-Amz-Target` and JSON body.
/// A transaction needs its items' own actions (`dynamodb:UpdateItem`,
/// `dynamodb:ConditionCheckItem`, ...) on each of their tables; a batch
/// needs its action on every table it names; a consumer's operations need
/// the consumer (its ARN, or its stream's ARN and its name), except
/// registering one, which needs the stream.
pub fn authorizations(target: &str, body: &Value) -> Vec<Authorization> {
    let Some((service, operation)) = target.split_once('.') else { return Vec::new() };
    let service = service.split('_').next().unwrap_or_default().to_ascii_lowercase();
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    let need = |action: &str, resource: Option<String>| Authorization { action: format!("{service}:{action}"), resource };
    match (service.as_str(), operation) {
        ("dynamodb", "TransactWriteItems" | "TransactGetItems") => body["TransactItems"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .flat_map(|item| item.iter())
            .filter_map(|(kind, action)| {
                let action_name = match kind.as_str() {
                    "ConditionCheck" => "ConditionCheckItem".to_owned(),
                    kind => format!("{kind}Item"),
                };
                Some(need(&action_name, Some(text(action, "TableName")?)))
            })
            .collect(),
        ("dynamodb", _) if body.get("RequestItems").is_some() => {
            body["RequestItems"].as_object().into_iter().flat_map(|tables| tables.keys()).map(|table| need(operation, Some(table.clone()))).collect()
        }
        ("dynamodb", _) => vec![need(operation, text(body, "TableName"))],
        // DynamoDB Streams' actions are DynamoDB's, on the stream's ARN (none in GetRecords and ListStreams).
        ("dynamodbstreams", _) => vec![Authorization { action: format!("dynamodb:{operation}"), resource: text(body, "StreamArn") }],
        (_, "RegisterStreamConsumer") => vec![need(operation, text(body, "StreamARN"))],
        _ => {
            let consumer = text(body, "ConsumerARN").or_else(|| {
                // A consumer's ARN is its stream's, its name and its creation time.
                Some(format!("{}/consumer/{}:0", text(body, "StreamARN")?, text(body, "ConsumerName")?))
            });
            let resource = consumer.or_else(|| text(body, "StreamARN")).or_else(|| text(body, "StreamName"));
            vec![need(operation, resource)]
        }
    }
}

/// Whether `policy` (an IAM policy document) has an `Allow` statement for
/// `action` on `arn`: actions match without regard to case, resources as
/// written; `*` matches any run of characters and `?` one, in both.
pub fn allows(policy: &Value, action: &str, arn: &str) -> bool {
    let list = |v: &Value| -> Vec<String> {
        match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(items) => items.iter().filter_map(|i| i.as_str().map(str::to_owned)).collect(),
            _ => Vec::new(),
        }
    };
    policy["Statement"].as_array().into_iter().flatten().any(|statement| {
        statement["Effect"] == "Allow"
            && list(&statement["Action"]).iter().any(|a| glob(&a.to_ascii_lowercase(), &action.to_ascii_lowercase()))
            && list(&statement["Resource"]).iter().any(|r| glob(r, arn))
    })
}

/// IAM's wildcard match of `text` by `pattern`.
fn glob(pattern: &str, text: &str) -> bool {
    let (pattern, text): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // matched[j]: the pattern so far matches text[..j].
    let mut matched = vec![false; text.len() + 1];
    matched[0] = true;
    for p in pattern {
        let mut next = vec![false; text.len() + 1];
        for j in 0..=text.len() {
            next[j] = match p {
                '*' => matched[j] || (j > 0 && next[j - 1]),
                '?' => j > 0 && matched[j - 1],
                c => j > 0 && matched[j - 1] && text[j - 1] == c,
            };
        }
        matched = next;
    }
    matched[text.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_transaction_needs_each_items_action_on_its_table() {
        let body = json!({"TransactItems": [
            {"ConditionCheck": {"TableName": "app"}},
            {"Put": {"TableName": "app-KclHostState"}},
            {"Delete": {"TableName": "app-KclHostState"}}
        ]});
        let needs: Vec<(String, String)> = authorizations("DynamoDB_20120810.TransactWriteItems", &body).into_iter().map(|a| (a.action, a.resource.unwrap())).collect();
        let pair = |a: &str, r: &str| (a.to_owned(), r.to_owned());
        assert_eq!(needs, [pair("dynamodb:ConditionCheckItem", "app"), pair("dynamodb:PutItem", "app-KclHostState"), pair("dynamodb:DeleteItem", "app-KclHostState")]);
    }

    #[test]
    fn a_consumer_is_named_by_its_arn_or_its_stream_and_name() {
        let stream = "arn:aws:kinesis:us-east-1:1:stream/s";
        let by_name = authorizations("Kinesis_20131202.DescribeStreamConsumer", &json!({"StreamARN": stream, "ConsumerName": "app"}));
        assert_eq!(by_name[0].resource, Some(format!("{stream}/consumer/app:0")));
        let register = authorizations("Kinesis_20131202.RegisterStreamConsumer", &json!({"StreamARN": stream, "ConsumerName": "app"}));
        assert_eq!(register[0].resource.as_deref(), Some(stream));
        assert_eq!(authorizations("Kinesis_20131202.GetRecords", &json!({"ShardIterator": "x"}))[0].resource, None);
    }

    #[test]
    fn wildcards_match_as_iam_matches_them() {
        let policy = json!({"Statement": [{"Effect": "Allow", "Action": ["kinesis:Get*"], "Resource": "arn:aws:kinesis:*:1:stream/s/consumer/app:*"}]});
        assert!(allows(&policy, "kinesis:getrecords", "arn:aws:kinesis:us-east-1:1:stream/s/consumer/app:17"));
        assert!(!allows(&policy, "kinesis:PutRecords", "arn:aws:kinesis:us-east-1:1:stream/s/consumer/app:17"));
        assert!(!allows(&policy, "kinesis:GetRecords", "arn:aws:kinesis:us-east-1:1:stream/s/consumer/other:17"));
        assert!(glob("a?c", "abc") && !glob("a?c", "ac") && glob("*", "") && !glob("", "a"));
    }
}
