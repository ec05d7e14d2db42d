//! The tokio server behind `dt-rdzv serve`.
