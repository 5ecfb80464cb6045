//! Helm engines (in progress).
