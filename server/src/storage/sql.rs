//! SQL text with its values bound as `?` parameters. Every query of the storage layer is built
//! as one, so that no value becomes SQL text and `bimodal-server sql` prints what is sent.

use clickhouse::query::Query;
use clickhouse::Client;

/// A value bound to a `?`.
#[derive(Clone, Debug)]
pub(super) enum Value {
    Str(String),
    U32(u32),
}

/// SQL text with `?` placeholders and their values, in order.
#[derive(Clone, Debug, Default)]
pub(super) struct Sql {
    pub text: String,
    pub values: Vec<Value>,
}

impl Sql {
    pub(super) fn new(text: &str) -> Sql {
        Sql {
            text: text.to_owned(),
            values: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, text: &str) -> &mut Sql {
        self.text.push_str(text);
        self
    }

    /// Appends `?` bound to `value`.
    pub(super) fn bind(&mut self, value: Value) -> &mut Sql {
        self.text.push('?');
        self.values.push(value);
        self
    }

    /// Appends `?, ?, …`, one bound to each of `values` (the inside of an `IN (…)` list).
    pub(super) fn bind_strs<S: AsRef<str>>(&mut self, values: impl IntoIterator<Item = S>) -> &mut Sql {
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.push(", ");
            }
            self.bind(Value::Str(v.as_ref().to_owned()));
        }
        self
    }

    pub(super) fn append(&mut self, other: Sql) -> &mut Sql {
        self.text.push_str(&other.text);
        self.values.extend(other.values);
        self
    }

    pub fn query(&self, client: &Client) -> Query {
        let mut q = client.query(&self.text).with_setting("max_query_size", "16777216");
        for v in &self.values {
            q = match v {
                Value::Str(s) => q.bind(s.as_str()),
                Value::U32(n) => q.bind(*n),
            };
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values follow their placeholders in order, also across appended pieces, and are
    /// rendered escaped.
    #[test]
    fn values_are_bound_in_the_order_of_their_placeholders() {
        let mut inner = Sql::new(" AND zone = ");
        inner.bind(Value::Str("a'b".into()));
        let mut sql = Sql::new("SELECT 1 WHERE node IN (");
        sql.bind_strs(["n1", "n2"])
            .push(")")
            .append(inner)
            .push(" AND t < ")
            .bind(Value::U32(7));
        assert_eq!(sql.text, "SELECT 1 WHERE node IN (?, ?) AND zone = ? AND t < ?");
        assert_eq!(sql.text.matches('?').count(), sql.values.len());
        let rendered = sql.query(&Client::default()).sql_display().to_string();
        assert_eq!(
            rendered,
            r"SELECT 1 WHERE node IN ('n1', 'n2') AND zone = 'a\'b' AND t < 7"
        );
    }

    /// An empty list binds nothing (the caller states what an empty list means).
    #[test]
    fn an_empty_list_binds_nothing() {
        let mut sql = Sql::new("x IN (");
        sql.bind_strs(Vec::<String>::new()).push(")");
        assert_eq!((sql.text.as_str(), sql.values.len()), ("x IN ()", 0));
    }
}
