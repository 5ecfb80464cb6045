//! bosun actors and domain state.
