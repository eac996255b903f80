//! `TCP_NODELAY` on the store's connections. sqlx 0.9.0 stopped setting it
//! (transact-rs/sqlx#4335; the fix, #4336, is merged but not released), and without it
//! a query larger than what the socket takes in one write (the checkpoint of a long run)
//! has its last segment held back until PostgreSQL acknowledges the previous one, which
//! Linux delays by 40 ms: W1 on the shared store spent 88 ms of each stage there
//! (docs/benchmarks.md). Until sqlx sets the option again, each new connection's socket
//! is found among the process's descriptors by its peer port, and the option set on it.
//! Setting it on another TCP socket to the same port (another connection of the pool)
//! is harmless; a descriptor closed meanwhile makes the calls fail, which is ignored.

use std::os::fd::{BorrowedFd, RawFd};

use nix::sys::socket::{getpeername, getsockopt, setsockopt, sockopt, SockType, SockaddrStorage};

/// Sets `TCP_NODELAY` on every TCP socket of this process connected to `port`.
pub(super) fn set_on_connections_to(port: u16) {
    let Ok(entries) = fs_err::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(raw) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<RawFd>().ok())
        else {
            continue;
        };
        let Ok(peer) = getpeername::<SockaddrStorage>(raw) else {
            continue;
        };
        let peer_port = peer
            .as_sockaddr_in()
            .map(|address| address.port())
            .or_else(|| peer.as_sockaddr_in6().map(|address| address.port()));
        if peer_port != Some(port) {
            continue;
        }
        #[allow(unsafe_code)]
        // SAFETY: the descriptor is only borrowed for the two calls below, which change a
        // socket option and nothing else; if it was closed (or reused) since it was
        // listed, the calls fail or set the option on another socket to the same port.
        let fd = unsafe { BorrowedFd::borrow_raw(raw) };
        if getsockopt(&fd, sockopt::SockType) == Ok(SockType::Stream) {
            let _ = setsockopt(&fd, sockopt::TcpNoDelay, &true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    use nix::sys::socket::{getsockopt, sockopt};

    #[test]
    fn sets_the_option_on_the_connections_to_the_port_only() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let other = TcpListener::bind("127.0.0.1:0").expect("another port");
        let port = listener.local_addr().expect("an address").port();
        let to_port = TcpStream::connect(("127.0.0.1", port)).expect("connects");
        let elsewhere =
            TcpStream::connect(other.local_addr().expect("an address")).expect("connects");
        let nodelay = |stream: &TcpStream| {
            getsockopt(&stream.as_fd(), sockopt::TcpNoDelay).expect("the option reads")
        };
        assert!(!nodelay(&to_port));
        super::set_on_connections_to(port);
        assert!(nodelay(&to_port));
        assert!(!nodelay(&elsewhere));
    }
}
