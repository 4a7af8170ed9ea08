//! The policy store's hashes: plans, tenants and overrides.

/// One of the store's hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Plan name -> limits.
    Plans,
    /// Tenant -> plan.
    Tenants,
    /// Override field -> override.
    Overrides,
}

impl Table {
    /// The name of what it holds, as the audit stream writes it.
    pub fn kind(self) -> &'static str {
        match self {
            Table::Plans => "plan",
            Table::Tenants => "tenant",
            Table::Overrides => "override",
        }
    }
}
