//! The server token (SPEC 14.1): `FABRO_SERVER_TOKEN`, else `{root}/server.token`
//! (created with 32 random bytes, mode 0600). [`Token`] has no `Debug` output of its
//! value, and compares in constant time.

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use rand::RngCore;
use subtle::ConstantTimeEq;

/// The server token.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Token([REDACTED])")
    }
}

impl Token {
    /// A token with this value.
    pub fn new(value: String) -> Token {
        Token(value)
    }

    /// The value, for the start-up line and clients.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token, compared in constant time.
    pub fn matches(&self, candidate: &str) -> bool {
        !candidate.is_empty() && bool::from(self.0.as_bytes().ct_eq(candidate.as_bytes()))
    }
}

/// The path of the token file under `root`.
pub fn token_file(root: &Path) -> PathBuf {
    root.join("server.token")
}

/// `FABRO_SERVER_TOKEN` when set (`env_token`), else the content of
/// `{root}/server.token`, created with 32 random bytes in base64url and mode 0600.
pub fn load_or_create_token(root: &Path, env_token: Option<String>) -> std::io::Result<Token> {
    if let Some(token) = env_token.filter(|token| !token.is_empty()) {
        return Ok(Token(token));
    }
    let path = token_file(root);
    match fs_err::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(Token(text.trim().to_owned())),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    fs_err::create_dir_all(root)?;
    let mut bytes = [0_u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let temporary = root.join(format!("server.token.{}.tmp", std::process::id()));
    {
        use std::os::unix::fs::OpenOptionsExt;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)?;
        file.write_all(token.as_bytes())?;
        file.sync_all()?;
    }
    fs_err::rename(&temporary, &path)?;
    Ok(Token(token))
}
