//! [`SmtpStub`]: a real SMTP server on a tokio TCP listener, speaking enough of RFC 5321 for a submission:
//! `EHLO` advertising `STARTTLS`, the TLS upgrade (tokio-rustls, with a certificate for `127.0.0.1` and
//! `localhost` issued at start-up by a fresh CA, whose PEM the worker is given to trust), `AUTH PLAIN` and
//! `AUTH LOGIN` when credentials are set, then `MAIL`, `RCPT`, `DATA`, `RSET`, `NOOP` and `QUIT`. `MAIL` before
//! STARTTLS (or before AUTH, when required) is refused with 530, as a submission server would.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::control::{Control, Fault};

/// One message the server accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedEmail {
    /// The `MAIL FROM` address.
    pub mail_from: String,
    /// The `RCPT TO` addresses.
    pub rcpt_to: Vec<String>,
    /// The message as sent after `DATA` (headers, blank line, body), dot-unstuffed, CRLF line ends.
    pub data: String,
    /// Whether it came over TLS.
    pub tls: bool,
    /// The user that authenticated, when any.
    pub auth_user: Option<String>,
}

impl ReceivedEmail {
    /// The first header `name` (case-insensitive), unfolded.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.data.split("\r\n\r\n").next().unwrap_or_default();
        let mut found: Option<String> = None;
        for line in head.split("\r\n") {
            match (&mut found, line.starts_with([' ', '\t'])) {
                (Some(value), true) => value.push_str(line),
                (Some(_), false) => break,
                (None, false) => {
                    let (key, value) = line.split_once(':').unwrap_or_default();
                    if key.eq_ignore_ascii_case(name) {
                        found = Some(value.trim().to_owned());
                    }
                }
                (None, true) => {}
            }
        }
        found
    }

    /// The body: everything after the first blank line.
    pub fn body(&self) -> String {
        self.data.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
    }
}

struct Shared {
    control: Control,
    auth: Option<(String, String)>,
    acceptor: TlsAcceptor,
    messages: Mutex<Vec<ReceivedEmail>>,
}

/// The SMTP stand-in; see the module docs. A [`Fault`] answers the end of `DATA`; `hold()` keeps that answer
/// back (the message is in, the client waits for the 250).
pub struct SmtpStub {
    addr: SocketAddr,
    shared: Arc<Shared>,
    ca_pem: String,
    task: tokio::task::JoinHandle<()>,
}

impl SmtpStub {
    /// A server requiring STARTTLS and, with `auth`, `AUTH` as that user and password.
    pub async fn start(auth: Option<(&str, &str)>) -> SmtpStub {
        let (ca_pem, acceptor) = tls();
        let auth = auth.map(|(user, pass)| (user.to_owned(), pass.to_owned()));
        let shared = Arc::new(Shared { control: Control::default(), auth, acceptor, messages: Mutex::default() });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let addr = listener.local_addr().expect("a local address");
        let serving = Arc::clone(&shared);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                drop(tokio::spawn(session(stream, Arc::clone(&serving))));
            }
        });
        SmtpStub { addr, shared, ca_pem, task }
    }

    /// `smtp://[user:pass@]127.0.0.1:PORT?tls=required` (`CAIRN_NOTIFY_SMTP_URL`).
    pub fn url(&self) -> String {
        let credentials = self.shared.auth.as_ref().map(|(u, p)| format!("{u}:{p}@")).unwrap_or_default();
        format!("smtp://{credentials}{}?tls=required", self.addr)
    }

    /// The PEM of the CA that issued the server's certificate (`CAIRN_NOTIFY_SMTP_CA_FILE` holds it).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// Writes [`Self::ca_pem`] to `path`.
    pub fn write_ca(&self, path: &Path) {
        std::fs::write(path, &self.ca_pem).expect("the CA file is written");
    }

    /// Every accepted message, in arrival order.
    pub fn received(&self) -> Vec<ReceivedEmail> {
        self.shared.messages.lock().unwrap().clone()
    }
}

super::stand_in_controls!(SmtpStub);

/// A fresh CA, and a TLS acceptor with a certificate it issued for `localhost` and `127.0.0.1`.
fn tls() -> (String, TlsAcceptor) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "Cairn test CA");
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    leaf.distinguished_name.push(DnType::CommonName, "localhost");
    leaf.use_authority_key_identifier_extension = true;
    leaf.extended_key_usages.push(ExtendedKeyUsagePurpose::ServerAuth);
    let certificate = leaf.signed_by(&leaf_key, &issuer).unwrap().der().clone();
    let key = rustls::pki_types::PrivatePkcs8KeyDer::from(leaf_key.serialize_der());
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certificate], key.into())
        .unwrap();
    (ca_pem, TlsAcceptor::from(Arc::new(config)))
}

/// One connection: the plain part up to STARTTLS, then the rest over TLS.
async fn session(stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let mut plain = BufReader::new(stream);
    plain.get_mut().write_all(b"220 cairn-test ESMTP ready\r\n").await?;
    if dialogue(&mut plain, &mut Transaction::default(), &shared).await? == After::Quit {
        return Ok(());
    }
    // The client waits for the 220 before its handshake, so nothing is left in the buffer.
    let secure = shared.acceptor.accept(plain.into_inner()).await?;
    let mut state = Transaction { tls: true, ..Transaction::default() };
    dialogue(&mut BufReader::new(secure), &mut state, &shared).await.map(drop)
}

#[derive(Debug, Default)]
struct Transaction {
    tls: bool,
    auth_user: Option<String>,
    mail_from: Option<String>,
    rcpt_to: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum After {
    Quit,
    StartTls,
}

async fn line<S: AsyncRead + Unpin>(io: &mut BufReader<S>) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if io.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_owned()))
}

async fn reply<S: AsyncRead + AsyncWrite + Unpin>(io: &mut BufReader<S>, text: &str) -> std::io::Result<()> {
    io.get_mut().write_all(format!("{text}\r\n").as_bytes()).await?;
    io.get_mut().flush().await
}

/// Commands until `QUIT`, the end of the connection, or `STARTTLS`.
async fn dialogue<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut BufReader<S>,
    state: &mut Transaction,
    shared: &Shared,
) -> std::io::Result<After> {
    while let Some(command) = line(io).await? {
        let (verb, rest) = command.split_once(' ').unwrap_or((&command, ""));
        let answer = match verb.to_ascii_uppercase().as_str() {
            "EHLO" => ehlo(state, shared),
            "HELO" => "250 cairn-test".to_owned(),
            "STARTTLS" if state.tls => "503 5.5.1 TLS already active".to_owned(),
            "STARTTLS" => {
                reply(io, "220 2.0.0 Ready to start TLS").await?;
                return Ok(After::StartTls);
            }
            "AUTH" => auth(io, rest, state, shared).await?,
            "MAIL" => mail(rest, state, shared),
            "RCPT" if state.mail_from.is_none() => "503 5.5.1 MAIL first".to_owned(),
            "RCPT" => {
                state.rcpt_to.push(address(rest));
                "250 2.1.5 Ok".to_owned()
            }
            "DATA" if state.rcpt_to.is_empty() => "503 5.5.1 RCPT first".to_owned(),
            "DATA" => data(io, state, shared).await?,
            "RSET" => {
                (state.mail_from, state.rcpt_to) = (None, Vec::new());
                "250 2.0.0 Ok".to_owned()
            }
            "NOOP" => "250 2.0.0 Ok".to_owned(),
            "QUIT" => {
                reply(io, "221 2.0.0 Bye").await?;
                return Ok(After::Quit);
            }
            _ => "502 5.5.2 Command not recognized".to_owned(),
        };
        reply(io, &answer).await?;
    }
    Ok(After::Quit)
}

fn ehlo(state: &Transaction, shared: &Shared) -> String {
    let mut lines = vec!["cairn-test", "8BITMIME", "SMTPUTF8"];
    if !state.tls {
        lines.push("STARTTLS");
    } else if shared.auth.is_some() {
        lines.push("AUTH PLAIN LOGIN");
    }
    let last = lines.len() - 1;
    let numbered: Vec<String> =
        lines.iter().enumerate().map(|(i, l)| format!("250{}{l}", if i == last { ' ' } else { '-' })).collect();
    numbered.join("\r\n")
}

/// The address inside `<…>` of a `MAIL FROM:` or `RCPT TO:` argument.
fn address(argument: &str) -> String {
    let inside = argument.split_once('<').and_then(|(_, rest)| rest.split_once('>')).map(|(a, _)| a);
    inside.unwrap_or(argument).to_owned()
}

fn mail(rest: &str, state: &mut Transaction, shared: &Shared) -> String {
    if !state.tls {
        return "530 5.7.0 Must issue a STARTTLS command first".to_owned();
    }
    if shared.auth.is_some() && state.auth_user.is_none() {
        return "530 5.7.0 Authentication required".to_owned();
    }
    (state.mail_from, state.rcpt_to) = (Some(address(rest)), Vec::new());
    "250 2.1.0 Ok".to_owned()
}

fn decode(text: &str) -> String {
    let bytes = base64::engine::general_purpose::STANDARD.decode(text.trim()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// `AUTH PLAIN [initial]` or `AUTH LOGIN`, checked against the configured credentials.
async fn auth<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut BufReader<S>,
    rest: &str,
    state: &mut Transaction,
    shared: &Shared,
) -> std::io::Result<String> {
    let Some((user, pass)) = &shared.auth else { return Ok("503 5.5.1 AUTH not available".to_owned()) };
    let (mechanism, initial) = rest.split_once(' ').unwrap_or((rest, ""));
    let given = match mechanism.to_ascii_uppercase().as_str() {
        "PLAIN" => {
            let response = if initial.is_empty() {
                reply(io, "334 ").await?;
                line(io).await?.unwrap_or_default()
            } else {
                initial.to_owned()
            };
            let decoded = decode(&response);
            let mut parts = decoded.split('\0').skip(1);
            (parts.next().unwrap_or_default().to_owned(), parts.next().unwrap_or_default().to_owned())
        }
        "LOGIN" => {
            reply(io, "334 VXNlcm5hbWU6").await?;
            let name = decode(&line(io).await?.unwrap_or_default());
            reply(io, "334 UGFzc3dvcmQ6").await?;
            (name, decode(&line(io).await?.unwrap_or_default()))
        }
        _ => return Ok("504 5.5.4 Unrecognized authentication type".to_owned()),
    };
    if given != (user.clone(), pass.clone()) {
        return Ok("535 5.7.8 Authentication credentials invalid".to_owned());
    }
    state.auth_user = Some(given.0);
    Ok("235 2.7.0 Authentication successful".to_owned())
}

/// The message up to the lone `.`, then the answer: a scripted fault, or accepted and recorded.
async fn data<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut BufReader<S>,
    state: &mut Transaction,
    shared: &Shared,
) -> std::io::Result<String> {
    reply(io, "354 End data with <CR><LF>.<CR><LF>").await?;
    let mut lines = Vec::new();
    while let Some(text) = line(io).await? {
        if text == "." {
            break;
        }
        lines.push(text.strip_prefix('.').filter(|_| text.starts_with("..")).unwrap_or(&text).to_owned());
    }
    let (mail_from, rcpt_to) = (state.mail_from.take().unwrap_or_default(), std::mem::take(&mut state.rcpt_to));
    if let Some(fault) = shared.control.arrive().await {
        return Ok(smtp_reply(&fault));
    }
    let email = ReceivedEmail {
        mail_from,
        rcpt_to,
        data: lines.join("\r\n"),
        tls: state.tls,
        auth_user: state.auth_user.clone(),
    };
    let mut messages = shared.messages.lock().unwrap();
    messages.push(email);
    Ok(format!("250 2.0.0 Ok: queued as {}", messages.len()))
}

fn smtp_reply(fault: &Fault) -> String {
    match fault {
        Fault::Status(code @ 400..=499) => format!("{code} 4.3.0 Temporary failure, try again later"),
        Fault::Status(code @ 500..=599) => format!("{code} 5.7.1 Message rejected"),
        Fault::RateLimited { retry_after_s } => format!("451 4.7.1 Rate limited, retry in {retry_after_s} s"),
        _ => "550 5.7.1 Message rejected".to_owned(),
    }
}
