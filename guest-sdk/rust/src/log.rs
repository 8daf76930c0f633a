//! Logging that reaches the host's log, tagged with the shard.
//!
//! Use the [`trace!`](crate::trace), [`debug!`](crate::debug),
//! [`info!`](crate::info), [`warn!`](crate::warn) and
//! [`error!`](crate::error) macros. (Anything printed to stdout or stderr
//! reaches the host log too, at info and warn.)

pub use crate::bindings::kcl::processor::log::Level;

/// Sends one line to the host log.
pub fn write(level: Level, message: &str) {
    crate::bindings::kcl::processor::log::log(level, message);
}

#[doc(hidden)]
#[macro_export]
macro_rules! __log {
    ($level:ident, $($arg:tt)+) => {
        $crate::log::write($crate::log::Level::$level, &::std::format!($($arg)+))
    };
}

/// Logs at trace level, with `format!` arguments.
#[macro_export]
macro_rules! trace { ($($arg:tt)+) => { $crate::__log!(Trace, $($arg)+) }; }
/// Logs at debug level, with `format!` arguments.
#[macro_export]
macro_rules! debug { ($($arg:tt)+) => { $crate::__log!(Debug, $($arg)+) }; }
/// Logs at info level, with `format!` arguments.
#[macro_export]
macro_rules! info { ($($arg:tt)+) => { $crate::__log!(Info, $($arg)+) }; }
/// Logs at warn level, with `format!` arguments.
#[macro_export]
macro_rules! warn { ($($arg:tt)+) => { $crate::__log!(Warn, $($arg)+) }; }
/// Logs at error level, with `format!` arguments.
#[macro_export]
macro_rules! error { ($($arg:tt)+) => { $crate::__log!(Error, $($arg)+) }; }
