//! Connections the server can reset: a listener wrapper whose streams carry a flag that a handler sets (through
//! the `ConnHandle` connect info) to make the connection end with a TCP RST before any response byte.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A `TcpListener` whose connections can be reset by a handler.
#[derive(Debug)]
pub(crate) struct ResettableListener {
    inner: TcpListener,
}

impl ResettableListener {
    pub(crate) fn new(inner: TcpListener) -> ResettableListener {
        ResettableListener { inner }
    }
}

impl Listener for ResettableListener {
    type Io = ResettableStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (stream, addr) = <TcpListener as Listener>::accept(&mut self.inner).await;
        (
            ResettableStream {
                inner: stream,
                reset: Arc::new(AtomicBool::new(false)),
            },
            addr,
        )
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that fails every write, and closes with RST, once its flag is set.
#[derive(Debug)]
pub(crate) struct ResettableStream {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

/// What a handler sees of its connection: the switch that resets it.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle(Arc<AtomicBool>);

impl ConnHandle {
    /// Make the connection end with a TCP RST instead of the response.
    pub(crate) fn reset(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Connected<IncomingStream<'_, ResettableListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, ResettableListener>) -> Self {
        ConnHandle(Arc::clone(&stream.io().reset))
    }
}

impl ResettableStream {
    fn check(&self) -> io::Result<()> {
        if self.reset.load(Ordering::Acquire) {
            // SO_LINGER 0 makes the close that follows the error an RST rather than a FIN.
            let _ = self.inner.set_zero_linger();
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "connection reset by the `reset` fault",
            ));
        }
        Ok(())
    }
}

impl Drop for ResettableStream {
    fn drop(&mut self) {
        // A reset connection may be closed without any write having been attempted.
        if self.reset.load(Ordering::Acquire) {
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for ResettableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ResettableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
