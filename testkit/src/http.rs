//! A keep-alive HTTP/1.1 client connection on loopback that sends the same GET each time
//! and reads its answer's status: for load through Envoy (the service's real-Envoy tests,
//! `make bench-service`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The longest answer (head and body) read: Envoy's and the backend's are under 200 bytes.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// How long a GET waits for its answer before the connection counts as failed.
const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// One keep-alive HTTP/1.1 connection to `127.0.0.1:port`, sending the same GET each time;
/// reconnected at the next GET after an error or an answer that closes it.
pub struct HttpConnection {
    port: u16,
    request: Vec<u8>,
    stream: Option<TcpStream>,
    buffer: Vec<u8>,
}

impl HttpConnection {
    /// Connects now (so that a run's connections are open before it starts); `headers` are
    /// sent with every GET.
    pub fn connect(port: u16, headers: &[(&str, &str)]) -> Result<Self, String> {
        let mut request = b"GET / HTTP/1.1\r\nhost: bench\r\n".to_vec();
        for (name, value) in headers {
            request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
        }
        request.extend_from_slice(b"\r\n");
        let mut connection = Self {
            port,
            request,
            stream: None,
            buffer: Vec::new(),
        };
        connection.stream = Some(connection.open()?);
        Ok(connection)
    }

    fn open(&self) -> Result<TcpStream, String> {
        let stream =
            TcpStream::connect(("127.0.0.1", self.port)).map_err(|error| error.to_string())?;
        stream
            .set_nodelay(true)
            .map_err(|error| error.to_string())?;
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .map_err(|error| error.to_string())?;
        Ok(stream)
    }

    /// Sends the GET and reads the whole answer: its status code.
    pub fn get(&mut self) -> Result<u16, String> {
        let result = self.exchange();
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    fn exchange(&mut self) -> Result<u16, String> {
        let mut stream = match self.stream.take() {
            Some(stream) => stream,
            None => self.open()?,
        };
        stream
            .write_all(&self.request)
            .map_err(|error| error.to_string())?;
        self.buffer.clear();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((status, length, close)) = parse_answer(&self.buffer)?
                && self.buffer.len() >= length
            {
                if !close {
                    self.stream = Some(stream);
                }
                return Ok(status);
            }
            if self.buffer.len() > MAX_ANSWER_BYTES {
                return Err(format!("an answer over {MAX_ANSWER_BYTES} bytes"));
            }
            let read = stream.read(&mut chunk).map_err(|error| error.to_string())?;
            if read == 0 {
                return Err("connection closed".into());
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}

/// The answer at the start of `buffer` once its head is whole: (status, the answer's whole
/// length, whether it closes the connection).
fn parse_answer(buffer: &[u8]) -> Result<Option<(u16, usize, bool)>, String> {
    let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
    let first = head.lines().next().unwrap_or("");
    let status = first
        .strip_prefix("http/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP/1.1 answer: {first}"))?;
    let header = |name: &str| {
        head.lines()
            .skip(1)
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
    };
    if header("transfer-encoding:").is_some() {
        return Err(format!("a chunked answer is not read here: {first}"));
    }
    let length: usize = header("content-length:")
        .and_then(|value| value.parse().ok())
        .unwrap_or(0);
    let close = header("connection:") == Some("close");
    Ok(Some((status, end + 4 + length, close)))
}
