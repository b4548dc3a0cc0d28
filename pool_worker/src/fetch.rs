//! Fetching the body of a URL order, with `reqwest` (HTTP/1.1, `http://` and
//! `https://` through the system's OpenSSL, which rdkafka links anyway).
//!
//! The fetch is bounded in every direction: the URL must be under
//! `ALLOWED_URLS` (compared on its parsed parts, see `policy`), redirects
//! are not followed (a redirect could leave the allowed URLs), no proxy from
//! the environment is used, the whole exchange must end within the time
//! limit and the body may not exceed the size limit. A failure's reason
//! names the URL and, for an answer other than 200, the HTTP status, never
//! the body: a URL order to an internal service must not bring that
//! service's content back in a `completed` record.

use crate::policy::{url_allowed, Refusal, UrlRule};
use std::time::Duration;

/// Why a URL order was not fetched.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum FetchError {
    /// The allow list forbids the URL (the order is `refused`).
    #[error("{0}")]
    Refused(Refusal),
    /// The URL is malformed or the fetch failed (the order is an `error`).
    #[error("{0}")]
    Failed(String),
}

impl FetchError {
    /// The reason of the order's completion (the tests read it; the shell
    /// formats the error itself).
    #[cfg(test)]
    pub(crate) fn reason(&self) -> String {
        self.to_string()
    }
}

/// Fetches `url`: a `GET` that must answer `200` within `timeout` with at
/// most `max_bytes` of body.
pub(crate) async fn fetch_body(
    url: &str,
    max_bytes: usize,
    timeout: Duration,
    allowed: &Option<Vec<UrlRule>>,
) -> Result<Vec<u8>, FetchError> {
    let parsed = url::Url::parse(url)
        .map_err(|e| FetchError::Failed(format!("URL {url} is malformed: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(FetchError::Failed(format!(
            "URL {url} is not http:// or https://"
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(FetchError::Refused(Refusal::UrlCredentials {
            url: url.to_string(),
        }));
    }
    if !url_allowed(&parsed, allowed) {
        return Err(FetchError::Refused(Refusal::Url {
            url: url.to_string(),
        }));
    }
    match tokio::time::timeout(timeout, get(parsed, max_bytes, timeout)).await {
        Ok(r) => r.map_err(|e| FetchError::Failed(format!("fetching {url}: {e}"))),
        Err(_) => Err(FetchError::Failed(format!(
            "fetching {url} took more than {} s",
            timeout.as_secs_f64()
        ))),
    }
}

async fn get(url: url::Url, max_bytes: usize, timeout: Duration) -> Result<Vec<u8>, String> {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent("pool_worker")
        .build()
        .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
    let mut resp = client.get(url).send().await.map_err(|e| describe(&e))?;
    let status = resp.status();
    if status != reqwest::StatusCode::OK {
        let redirect = if status.is_redirection() {
            " (redirects are not followed)"
        } else {
            ""
        };
        return Err(format!("the server answered HTTP {status}{redirect}"));
    }
    let too_large = || format!("the order is larger than {max_bytes} bytes");
    if resp.content_length().is_some_and(|n| n > max_bytes as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e))? {
        if chunk.len() > max_bytes.saturating_sub(body.len()) {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A reqwest error with its causes (its own message is often only
/// "error sending request"), without the URL, which the caller names.
fn describe(e: &reqwest::Error) -> String {
    let mut s = if e.is_connect() {
        "cannot connect".to_string()
    } else {
        "the request failed".to_string()
    };
    let mut source = std::error::Error::source(e);
    let mut n = 0;
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
        n += 1;
        if n == 4 {
            break;
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::TcpListener;

    /// A one-connection HTTP server on 127.0.0.1 answering `response`;
    /// yields the request head.
    async fn serve(response: &'static [u8]) -> (String, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut rd = BufReader::new(stream);
            let mut request = String::new();
            while !request.ends_with("\r\n\r\n") {
                if rd.read_line(&mut request).await.unwrap() == 0 {
                    break;
                }
            }
            if response.is_empty() {
                std::future::pending::<()>().await; // never answer
            }
            rd.get_mut().write_all(response).await.unwrap();
            let _ = rd.get_mut().shutdown().await;
            request
        });
        (base, task)
    }

    const SEC: Duration = Duration::from_secs(10);

    fn rules(v: &[&str]) -> Option<Vec<UrlRule>> {
        crate::policy::parse_url_rules(Some(v.iter().map(|s| s.to_string()).collect())).unwrap()
    }

    #[tokio::test]
    async fn bodies_of_every_framing() {
        let (base, req) =
            serve(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nX: y\r\n\r\necho hi").await;
        let body = fetch_body(
            &format!("{base}/orders/1?x=y#frag"),
            100,
            SEC,
            &rules(&[&format!("{base}/orders/")]),
        )
        .await;
        assert_eq!(body.unwrap(), b"echo hi");
        let request = req.await.unwrap();
        assert!(
            request.starts_with("GET /orders/1?x=y HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(request
            .to_ascii_lowercase()
            .contains(&format!("\r\nhost: {}\r\n", &base["http://".len()..])));

        let (base, _) = serve(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nto the end").await;
        assert_eq!(
            fetch_body(&base, 100, SEC, &None).await.unwrap(),
            b"to the end"
        );

        let (base, _) =
            serve(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=1\r\necho\r\n3\r\n hi\r\n0\r\n\r\n").await;
        assert_eq!(
            fetch_body(&base, 100, SEC, &None).await.unwrap(),
            b"echo hi"
        );
    }

    #[tokio::test]
    async fn failures_name_the_url_and_status_never_the_body() {
        let (base, _) =
            serve(b"HTTP/1.1 404 Not Found\r\nContent-Length: 19\r\n\r\nsecret-of-internal").await;
        let e = fetch_body(&format!("{base}/x"), 100, SEC, &None)
            .await
            .unwrap_err();
        assert_eq!(
            e,
            FetchError::Failed(format!(
                "fetching {base}/x: the server answered HTTP 404 Not Found"
            ))
        );
        assert!(!e.reason().contains("secret"));

        let (base, _) =
            serve(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 6\r\n\r\nsecret").await;
        let e = fetch_body(&base, 100, SEC, &None).await.unwrap_err();
        assert!(
            e.reason().contains("500") && !e.reason().contains("secret"),
            "{e:?}"
        );

        for resp in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"[..],
            b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhello world",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n",
        ] {
            let (base, _) = serve(resp).await;
            let e = fetch_body(&base, 10, SEC, &None).await.unwrap_err();
            assert!(e.reason().contains("larger than 10 bytes"), "{e:?}");
            assert!(!e.reason().contains("hello"));
        }
        let (base, _) = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\nshort").await;
        assert!(matches!(
            fetch_body(&base, 100, SEC, &None).await,
            Err(FetchError::Failed(_))
        ));

        let (base, _) = serve(b"").await;
        let e = fetch_body(&base, 100, Duration::from_millis(200), &None)
            .await
            .unwrap_err();
        assert!(
            e.reason().contains(&base) && e.reason().contains("0.2 s"),
            "{e:?}"
        );

        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = fetch_body(&format!("http://127.0.0.1:{dead}/x"), 100, SEC, &None)
            .await
            .unwrap_err();
        assert!(
            e.reason().contains("cannot connect") && e.reason().contains(&dead.to_string()),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn redirects_are_not_followed() {
        // The target only listens: a followed redirect would have connected
        // before the fetch returned, leaving a connection to accept.
        let target = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        target.set_nonblocking(true).unwrap();
        let answer = format!(
            "HTTP/1.1 302 Found\r\nLocation: http://{}/elsewhere\r\nContent-Length: 0\r\n\r\n",
            target.local_addr().unwrap()
        );
        let (base, _) = serve(Box::leak(answer.into_bytes().into_boxed_slice())).await;
        let e = fetch_body(&base, 100, SEC, &None).await.unwrap_err();
        assert!(
            e.reason().contains("302") && e.reason().contains("not followed"),
            "{e:?}"
        );
        let accepted = target.accept();
        assert!(
            matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the redirect's target was contacted: {accepted:?}"
        );
    }

    #[tokio::test]
    async fn https_is_spoken() {
        // A plain HTTP server: the TLS handshake fails, which shows that
        // https:// URLs go through TLS rather than being refused.
        let (base, req) = serve(b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ntrue").await;
        let url = base.replacen("http://", "https://", 1);
        let e = fetch_body(&url, 100, Duration::from_secs(1), &None)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, FetchError::Failed(r) if r.contains(&url)),
            "{e:?}"
        );
        let head = tokio::time::timeout(SEC, req)
            .await
            .unwrap()
            .unwrap_or_default();
        assert!(!head.starts_with("GET"), "sent in clear text: {head:?}");
    }

    #[tokio::test]
    async fn the_allow_list_is_checked_before_connecting() {
        let allowed = rules(&["http://orders.internal"]);
        for u in [
            "http://orders.internal.evil.net/x",
            "http://orders.internal:81/x",
            "http://127.0.0.1:9/x",
        ] {
            let e = fetch_body(u, 100, SEC, &allowed).await.unwrap_err();
            assert!(
                matches!(&e, FetchError::Refused(r) if r.to_string().contains(u)),
                "{e:?}"
            );
        }
        let e = fetch_body("http://u:p@orders.internal/x", 100, SEC, &None)
            .await
            .unwrap_err();
        assert!(matches!(e, FetchError::Refused(_)));
        assert!(matches!(
            fetch_body("ftp://h/x", 100, SEC, &None).await,
            Err(FetchError::Failed(_))
        ));
    }
}
