//! The bearer token a client (agent, CLI) presents to a server that has tokens: one interceptor
//! for every gRPC client of bimodal.

/// Adds `authorization: Bearer TOKEN` to every call; nothing without a token.
#[derive(Clone, Debug, Default)]
pub struct Bearer(Option<tonic::metadata::AsciiMetadataValue>);

impl Bearer {
    /// `None` or an empty token: no header. A token with characters a header cannot carry is
    /// refused.
    pub fn new(token: Option<&str>) -> Result<Bearer, String> {
        match token.map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(Bearer(None)),
            Some(t) => format!("Bearer {t}")
                .parse()
                .map(|v| Bearer(Some(v)))
                .map_err(|_| "the token holds characters an HTTP header cannot carry".to_owned()),
        }
    }

    /// The header value, for HTTP clients.
    pub fn header(&self) -> Option<&str> {
        self.0.as_ref().and_then(|v| v.to_str().ok())
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            request.metadata_mut().insert("authorization", v.clone());
        }
        Ok(request)
    }
}

/// A channel to `url`. Only `http://` for now: bimodal is built without TLS, and an `https://`
/// URL is refused rather than spoken to in plain text.
pub async fn channel(url: &str) -> Result<tonic::transport::Channel, Box<dyn std::error::Error + Send + Sync>> {
    if url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("https://")) {
        return Err(format!(
            "`{url}`: this build speaks no TLS and will not send profiles or tokens in plain text to an https:// \
             server; use http:// (on a trusted network or loopback) until TLS is supported"
        )
        .into());
    }
    Ok(tonic::transport::Endpoint::from_shared(url.to_owned())?.connect().await?)
}
