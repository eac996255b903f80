//! A `fabro server` process started by a test: spawned with its stderr collected, ready
//! once it printed its start-up line (`fabro server listening on http://{address}/?token=…`),
//! killed when dropped. The CLI's server tests and the browser tests wrap it with their
//! own requests and shutdown.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The start-up line's prefix.
const LISTENING: &str = "fabro server listening on http://";

/// A running `fabro server`.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// `127.0.0.1:{port}`.
    pub address: String,
    /// The token of the start-up line.
    pub token: String,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ServerProcess {
    /// Spawns `command` (`fabro server --bind …` with its environment set; its stdio is
    /// set here) and waits for the start-up line.
    ///
    /// # Panics
    /// When the server cannot be spawned or prints no start-up line within 30 s.
    pub fn spawn(mut command: Command) -> ServerProcess {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("fabro server starts");
        let pipe = child.stderr.take().expect("stderr is piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (sender, receiver) = std::sync::mpsc::channel();
        let collected = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix(LISTENING) {
                    let _ = sender.send(url.to_owned());
                }
                collected
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line);
            }
        });
        let mut process = ServerProcess {
            child,
            address: String::new(),
            token: String::new(),
            lines,
        };
        let Ok(url) = receiver.recv_timeout(Duration::from_secs(30)) else {
            panic!("no start-up line: {:?}", process.stderr_lines());
        };
        let (address, token) = url.split_once("/?token=").expect("the line has the token");
        address.clone_into(&mut process.address);
        token.clone_into(&mut process.token);
        process
    }

    /// The lines the server wrote to stderr so far.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.lines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How the server exited, waiting at most `limit`; `None` while it still runs (or
    /// when it cannot be waited for).
    pub fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) => {}
                Err(_) => return None,
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
