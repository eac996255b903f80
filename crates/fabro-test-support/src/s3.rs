//! [`S3Server`]: a real S3-compatible server on loopback for one test: moto's
//! `moto_server` (PyPI), which `.ci/run` installs into `target/st-venv`, started on a free
//! port with one bucket, and stopped when the test ends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::workspace_root;

/// A running `moto_server` with a bucket.
#[derive(Debug)]
pub struct S3Server {
    child: Child,
    endpoint: String,
    bucket: String,
}

impl S3Server {
    /// Starts a server with the bucket `bucket`; `None` (after [`crate::skip`], which
    /// fails the test where `CI` is set) when `moto_server` is not installed.
    ///
    /// # Panics
    /// When the installed server does not start or refuses the bucket.
    pub fn start(test: &str, bucket: &str) -> Option<S3Server> {
        let program = workspace_root().join("target/st-venv/bin/moto_server");
        if !program.is_file() {
            crate::skip(
                test,
                "moto_server is not installed (.ci/run installs it into target/st-venv)",
            );
            return None;
        }
        let mut child = Command::new(program)
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("moto_server starts");
        let stderr = child.stderr.take().expect("piped");
        let (sender, receiver) = std::sync::mpsc::channel();
        // Werkzeug names the port it bound on stderr; the rest of its log is drained.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("http://127.0.0.1:") {
                    let _ = sender.send(line[at..].trim().to_owned());
                }
            }
        });
        let endpoint = receiver
            .recv_timeout(Duration::from_secs(60))
            .expect("moto_server names its address within a minute");
        let server = S3Server {
            child,
            endpoint,
            bucket: bucket.to_owned(),
        };
        server.create_bucket();
        Some(server)
    }

    /// `http://127.0.0.1:{port}`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    fn create_bucket(&self) {
        let address = self.endpoint.trim_start_matches("http://");
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut stream = loop {
            match TcpStream::connect(address) {
                Ok(stream) => break stream,
                Err(error) => {
                    assert!(
                        Instant::now() < deadline,
                        "moto_server at {address}: {error}"
                    );
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        write!(
            stream,
            "PUT /{} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.bucket
        )
        .expect("the request is sent");
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .expect("moto_server answers");
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "create bucket: {answer}"
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
