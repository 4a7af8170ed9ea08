//! The Redis key of a store-backed policy's limit: one per tenant, policy, limit name and
//! algorithm kind, whatever plan or override sets its value.

/// The key template of limit `limit` (of kind `kind`) of store-backed policy `policy`,
/// whose tenant is the input `tenant_input`: one slot per tenant (the hash tag), the same
/// key whatever plan or override sets the limit.
pub fn key_template(
    tenant_input: &str,
    policy: &str,
    limit: &str,
    kind: redis_ratelimit_core::kinds::Kind,
) -> String {
    format!(
        "rl:plan:{{{{{{{tenant_input}}}}}}}:{policy}:{limit}:{}",
        kind.short_name()
    )
}
