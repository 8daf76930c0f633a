//! A call that may never be answered: asked again, beside the first, after
//! a silence longer than the server's slow answers.
//!
//! Over HTTP/1.1 a request sent into a black hole (a dropped route, a
//! half-open connection) and one a busy server is still working on look the
//! same: no byte yet. Timing the first out early would cut off slow large
//! answers; waiting its full time-out leaves the reader idle long after the
//! network is back. So the first call keeps its whole time-out, and after a
//! silence of [`Hedge::patience`] the same request goes out again on another
//! connection; whichever answers first wins. A later hedge replaces the one
//! before it (a request sent into the silence will not be answered), so at
//! most two calls are open, and the reader is back at most one patience
//! after the network is. Only idempotent requests may be hedged (GetRecords
//! with the same iterator returns the same records).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use tokio::time::Instant;

/// The shortest silence that brings a second call.
pub const MIN_PATIENCE: Duration = Duration::from_secs(1);
/// Patience is this many times the slowest recent answer.
const SLOWEST_FACTOR: u32 = 3;

/// How long answers take, for when to ask again.
#[derive(Clone, Debug)]
pub struct Hedge {
    /// The slowest recent answer, decaying by an eighth at each answer.
    slowest: Duration,
    /// The longest patience: the calls' own time-out.
    cap: Duration,
}

/// What a hedged call did besides answering.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Asked {
    /// Requests sent after the first.
    pub again: u32,
}

impl Hedge {
    /// Patience from [`MIN_PATIENCE`] up to `cap`.
    pub fn new(cap: Duration) -> Self {
        Self { slowest: Duration::ZERO, cap }
    }

    /// The silence after which the request goes out again.
    pub fn patience(&self) -> Duration {
        (self.slowest * SLOWEST_FACTOR).clamp(MIN_PATIENCE, self.cap)
    }

    /// Runs `call`, and again after each silence of [`Self::patience`]
    /// (keeping the first and the newest open), until one answers. An
    /// answer — an error too — ends the others.
    pub async fn call<T, E, F>(&mut self, call: impl Fn() -> F) -> (Result<T, E>, Asked)
    where
        F: Future<Output = Result<T, E>>,
    {
        let patience = self.patience();
        let started = Instant::now();
        let mut first = pin!(call());
        let mut newest = pin!(None::<F>);
        let mut newest_sent = started;
        let mut asked = Asked::default();
        loop {
            let next = newest_sent + patience;
            let (result, sent) = tokio::select! {
                result = &mut first => (result, started),
                Some(result) = async { Some(newest.as_mut().as_pin_mut()?.await) } => (result, newest_sent),
                () = tokio::time::sleep_until(next) => {
                    newest.set(Some(call()));
                    newest_sent = Instant::now();
                    asked.again += 1;
                    continue;
                }
            };
            if result.is_ok() {
                self.answered(sent.elapsed());
            }
            return (result, asked);
        }
    }

    /// An answer took `took`: patience follows the slowest recent one.
    fn answered(&mut self, took: Duration) {
        self.slowest = took.max(self.slowest - self.slowest / 8);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[tokio::test(start_paused = true)]
    async fn a_silent_call_is_asked_again_and_the_newest_answer_wins() {
        let mut hedge = Hedge::new(Duration::from_secs(30));
        let sent = Cell::new(0);
        // The first two requests go into a black hole; the third is answered.
        let (result, asked) = hedge
            .call(|| {
                sent.set(sent.get() + 1);
                let n = sent.get();
                async move {
                    if n < 3 {
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, ()>(n)
                }
            })
            .await;
        assert_eq!((result, asked.again), (Ok(3), 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_first_answer_still_wins_and_lengthens_patience() {
        let mut hedge = Hedge::new(Duration::from_secs(30));
        let sent = Cell::new(0);
        let started = Instant::now();
        // The first takes 2.5 s; every other request is never answered.
        let (result, asked) = hedge
            .call(|| {
                sent.set(sent.get() + 1);
                let n = sent.get();
                async move {
                    if n > 1 {
                        std::future::pending::<()>().await;
                    }
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                    Ok::<_, ()>(n)
                }
            })
            .await;
        assert_eq!((result, asked.again), (Ok(1), 2));
        assert_eq!(started.elapsed(), Duration::from_millis(2500));
        assert_eq!(hedge.patience(), Duration::from_millis(7500), "three times the slowest answer");
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_answer_ends_the_call_and_fast_answers_keep_patience_short() {
        let mut hedge = Hedge::new(Duration::from_secs(30));
        let (result, asked) = hedge.call(|| async { Err::<(), _>("500") }).await;
        assert_eq!((result, asked.again), (Err("500"), 0));
        for _ in 0..3 {
            let (result, _) = hedge
                .call(|| async {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Ok::<_, ()>(())
                })
                .await;
            assert!(result.is_ok());
        }
        assert_eq!(hedge.patience(), MIN_PATIENCE);
    }
}
