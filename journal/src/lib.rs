//! Durable event journal.
