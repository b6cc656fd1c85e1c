//! Cairn's orchestrator: API server, scheduler, dispatcher, timers and lease reaper.
//!
//! Empty until the durable-core issue lands.
