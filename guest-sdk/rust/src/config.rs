//! Variables the operator sets (`kcl-host run --var api_url=https://…`),
//! read through `wasi:config/store`: a processor reads its settings without
//! a rebuild.

use crate::bindings::wasi::config::store;

/// The variable `key`, if the operator set it.
pub fn get(key: &str) -> Option<String> {
    store::get(key).ok().flatten()
}

/// Every variable the operator set.
pub fn all() -> Vec<(String, String)> {
    store::get_all().unwrap_or_default()
}
