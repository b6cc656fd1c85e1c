//! SKELETON: placeholders; the helper implementing this module replaces this file.
