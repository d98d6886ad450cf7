//! What a worker keeps for each tenant as one snapshot compiled it (a near cache, a watch of its tracking
//! clients): the tenant compiled anew (its route or policies changed) gets a new one, and one whose tenant is gone
//! or compiled anew is dropped.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, Weak};

use super::Tenant;

/// A tenant's `T`, and the tenant as compiled when it was made (held weakly: its address is not reused meanwhile).
type Made<T> = (Weak<Tenant>, Rc<T>);

/// Each tenant's `T` on one worker, by name, made for the tenant as compiled.
pub(crate) struct PerCompiledTenant<T> {
    tenants: RefCell<HashMap<String, Made<T>>>,
}

impl<T> Default for PerCompiledTenant<T> {
    fn default() -> Self {
        PerCompiledTenant {
            tenants: RefCell::new(HashMap::new()),
        }
    }
}

impl<T> PerCompiledTenant<T> {
    /// `tenant`'s, made by `make` if it has none, or only one made for the tenant as an earlier snapshot had it.
    pub(crate) fn get_or_make(&self, tenant: &Arc<Tenant>, make: impl FnOnce() -> Rc<T>) -> Rc<T> {
        let mut tenants = self.tenants.borrow_mut();
        if let Some((compiled, value)) = tenants.get(&tenant.name)
            && compiled.as_ptr() == Arc::as_ptr(tenant)
        {
            return Rc::clone(value);
        }
        let value = make();
        let entry = (Arc::downgrade(tenant), Rc::clone(&value));
        tenants.insert(tenant.name.clone(), entry);
        value
    }

    /// Drops the ones of tenants `current` no longer has as they were (removed, or compiled anew).
    pub(crate) fn retain(&self, current: impl Fn(&str) -> Option<*const Tenant>) {
        self.tenants
            .borrow_mut()
            .retain(|name, (compiled, _)| current(name) == Some(compiled.as_ptr()));
    }
}
