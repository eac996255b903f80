//! [`Gate`]: a TCP proxy on loopback in front of a real service (PostgreSQL, an S3
//! server) that a test can close and open again, so that the service is lost to the
//! process under test while it keeps running and keeps what it stored (SPEC 18.4).
//!
//! Closing shuts down every proxied connection in both directions and answers new ones
//! by closing them at once, as a service that went away does; opening lets new
//! connections through again.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

/// A proxy on `127.0.0.1:{port}` forwarding to one target while open.
#[derive(Debug)]
pub struct Gate {
    address: SocketAddr,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    open: AtomicBool,
    stopped: AtomicBool,
    /// Both ends of every proxied connection, to shut them down on close.
    streams: Mutex<Vec<TcpStream>>,
}

impl Gate {
    /// An open gate to `target` on a free loopback port.
    ///
    /// # Panics
    /// When no loopback port can be bound: the machine cannot run network tests at all.
    pub fn start(target: SocketAddr) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port for the gate");
        let address = listener
            .local_addr()
            .expect("a bound listener has an address");
        let shared = Arc::new(Shared {
            target,
            open: AtomicBool::new(true),
            stopped: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || accept(&listener, &accepting));
        Gate { address, shared }
    }

    /// Where clients connect.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// Cuts every connection and refuses new ones until [`Gate::open`].
    pub fn close(&self) {
        self.shared.open.store(false, Ordering::SeqCst);
        self.shared.cut_all();
    }

    /// Lets new connections through again.
    pub fn open(&self) {
        self.shared.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.shared.cut_all();
        // Wakes the accepting thread so that it sees the flag and ends.
        let _ = TcpStream::connect(self.address);
    }
}

impl Shared {
    fn cut_all(&self) {
        let mut streams = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        for stream in streams.drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    fn keep(&self, stream: &TcpStream) -> bool {
        match stream.try_clone() {
            Ok(clone) => {
                self.streams
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(clone);
                true
            }
            Err(_) => false,
        }
    }
}

fn accept(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        if !shared.open.load(Ordering::SeqCst) {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let Ok(upstream) = TcpStream::connect(shared.target) else {
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        if !(shared.keep(&client) && shared.keep(&upstream)) {
            continue;
        }
        // A close between the check above and `keep` must not leave this one open.
        if !shared.open.load(Ordering::SeqCst) {
            shared.cut_all();
            continue;
        }
        let (Ok(client_reader), Ok(upstream_reader)) = (client.try_clone(), upstream.try_clone())
        else {
            continue;
        };
        thread::spawn(move || pipe(client_reader, upstream));
        thread::spawn(move || pipe(upstream_reader, client));
    }
}

/// Copies `from` into `to` until either side ends, then shuts both down.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buffer = [0_u8; 16 * 1024];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if to.write_all(&buffer[..read]).is_err() {
                    break;
                }
            }
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let address = listener.local_addr().expect("address");
        thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                thread::spawn(move || {
                    let mut reader = stream.try_clone().expect("clone");
                    let mut writer = stream;
                    let _ = std::io::copy(&mut reader, &mut writer);
                });
            }
        });
        address
    }

    fn round_trip(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        stream.write_all(b"ping")?;
        let mut answer = [0_u8; 4];
        stream.read_exact(&mut answer)?;
        Ok(answer.to_vec())
    }

    #[test]
    fn a_closed_gate_cuts_connections_and_an_opened_one_forwards_again() {
        let gate = Gate::start(echo_server());
        let mut stream = TcpStream::connect(gate.address()).expect("connects");
        assert_eq!(round_trip(&mut stream).expect("forwarded"), b"ping");

        gate.close();
        assert!(round_trip(&mut stream).is_err(), "a cut connection fails");
        let mut refused = TcpStream::connect(gate.address()).expect("accepted, then closed");
        assert!(round_trip(&mut refused).is_err(), "a new connection fails");

        gate.open();
        let mut again = TcpStream::connect(gate.address()).expect("connects");
        assert_eq!(round_trip(&mut again).expect("forwarded"), b"ping");
    }
}
