//! relayd, the daemon and its library: configuration, the service registry, the running
//! daemon (queues + rules), and the status protocol. The binary (`main.rs`) is a thin CLI
//! over this; a custom build registers its own services and calls [`cli::main_with`].

pub mod cli;
pub mod config;
mod counter_store;
pub mod daemon;
pub mod dist;
pub mod ike;
pub mod listeners;
pub mod lock;
pub mod metrics;
pub mod notify;
pub mod privilege;
pub mod qos;
pub mod registry;
pub mod replay;
pub mod resources;
pub mod rules;
pub mod state_dirs;
pub mod status;
pub mod users;
mod xdp;

pub use registry::Registry;
