//! SKELETON: `when` conditions in CEL; the helper implementing this module replaces this file.
