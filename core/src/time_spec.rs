//! SKELETON: `not_before` time specs; the helper implementing this module replaces this file.
