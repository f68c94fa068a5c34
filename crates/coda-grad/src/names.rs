//! Fresh names for the backward block's inputs and outputs.

use std::collections::BTreeSet;

/// The names taken so far in one block's interface.
#[derive(Debug, Default)]
pub(crate) struct Names {
    taken: BTreeSet<String>,
}

impl Names {
    /// Reserves a name that must stay as it is (a forward input).
    pub(crate) fn keep(&mut self, name: &str) {
        self.taken.insert(name.to_string());
    }

    /// `base`, or `base_2`, `base_3`, … if it is taken; reserved.
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 2;
        while self.taken.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// The name of the gradient of a tensor called `name`.
pub(crate) fn grad_name(name: &str) -> String {
    format!("d{name}")
}
