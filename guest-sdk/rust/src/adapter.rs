//! Bridges the generated `record-processor` export to a [`RecordProcessor`].

use std::any::Any;
use std::cell::RefCell;
use std::marker::PhantomData;

use crate::bindings::exports::kcl::processor::record_processor::Guest;
use crate::bindings::exports::kcl::processor::window;
use crate::bindings::kcl::processor::types as wit;
use crate::{Checkpointer, ProcessorError, RecordProcessor};

/// The export glue for processor type `P`; named by [`export_processor!`](crate::export_processor).
pub struct Adapter<P>(PhantomData<P>);

thread_local! {
    /// The instance's processor. A component instance serves one shard, so
    /// there is exactly one, created by `initialize`.
    static PROCESSOR: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

const CHECKPOINTER: Checkpointer = Checkpointer::new();

fn with_processor<P: RecordProcessor>(
    call: &str,
    f: impl FnOnce(&mut P) -> Result<(), ProcessorError>,
) -> Result<(), wit::ProcessorError> {
    PROCESSOR.with_borrow_mut(|slot| match slot.as_mut().and_then(|p| p.downcast_mut::<P>()) {
        Some(processor) => f(processor).map_err(Into::into),
        None => Err(wit::ProcessorError::Fatal(format!("{call} was called before initialize"))),
    })
}

impl<P: RecordProcessor> Guest for Adapter<P> {
    fn initialize(shard: wit::ShardInfo) -> Result<(), wit::ProcessorError> {
        let processor = P::initialize(shard.into())?;
        PROCESSOR.set(Some(Box::new(processor)));
        Ok(())
    }

    fn process_records(batch: wit::Batch) -> Result<(), wit::ProcessorError> {
        with_processor::<P>("process-records", |p| p.process_records(batch.into(), &CHECKPOINTER))
    }

    fn shutdown(reason: wit::ShutdownReason) -> Result<(), wit::ProcessorError> {
        let result = with_processor::<P>("shutdown", |p| p.shutdown(reason.into(), &CHECKPOINTER));
        PROCESSOR.set(None);
        result
    }
}

impl<P: RecordProcessor> window::Guest for Adapter<P> {
    fn close(window: window::WindowBounds, keys: Vec<String>) -> Result<(), wit::ProcessorError> {
        with_processor::<P>("close", |p| p.close_window(window.into(), keys))
    }
}
