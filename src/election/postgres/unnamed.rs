//! How every statement with parameters is sent: unnamed (Parse, Bind, Describe, Execute, Sync
//! in one message, `query_typed`), never prepared by name. A pooler in transaction mode
//! (pgbouncer before 1.21) hands each transaction any server connection: a named statement
//! prepared on one is missing on the next, or collides with another client's of the same name
//! (`prepared statement "s1" already exists`, and the pool stays poisoned). An unnamed one lives
//! only until the next Parse on the same connection, all inside one Sync. It also saves the
//! round trip of a separate prepare. Statements without parameters may use the simple-query
//! protocol (`simple_query`, `batch_execute`), which binds nothing either.
//!
//! Use `unnamed::query(&client, sql, &[&a, &b])` and its siblings wherever `client.query`
//! would be used; each parameter says its own PostgreSQL type ([`unnamed::Param`]).

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Error, Row};

/// A statement parameter and the type it is sent as (the server infers none: the type of
/// every parameter of an unnamed statement sent in one go is given).
pub trait Param: ToSql + Sync {
    fn pg_type(&self) -> Type;
}

macro_rules! param {
    ($($rust:ty => $pg:ident),* $(,)?) => {
        $(
            impl Param for $rust {
                fn pg_type(&self) -> Type {
                    Type::$pg
                }
            }
            impl Param for Option<$rust> {
                fn pg_type(&self) -> Type {
                    Type::$pg
                }
            }
        )*
    };
}
param!(String => TEXT, &str => TEXT, i64 => INT8, Vec<u8> => BYTEA, bool => BOOL);

fn typed<'a>(params: &'a [&'a dyn Param]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    params.iter().map(|p| (*p as _, p.pg_type())).collect()
}

pub async fn query(client: &Client, sql: &str, params: &[&dyn Param]) -> Result<Vec<Row>, Error> {
    client.query_typed(sql, &typed(params)).await
}

pub async fn query_opt(
    client: &Client,
    sql: &str,
    params: &[&dyn Param],
) -> Result<Option<Row>, Error> {
    client.query_typed_opt(sql, &typed(params)).await
}

pub async fn query_one(client: &Client, sql: &str, params: &[&dyn Param]) -> Result<Row, Error> {
    client.query_typed_one(sql, &typed(params)).await
}

/// The number of rows the statement wrote.
pub async fn execute(client: &Client, sql: &str, params: &[&dyn Param]) -> Result<u64, Error> {
    client.execute_typed(sql, &typed(params)).await
}
