//! Store URLs as messages show them: the password replaced (SPEC 13.1, 18.1).

/// `url` with its password (if any) replaced by `***`; text that is not a URL is
/// returned with everything between `://` and the last `@` replaced instead, so that a
/// malformed URL never shows its credentials either.
pub fn redact_url(url: &str) -> String {
    match ::url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                // Setting a password fails only for URLs that cannot have one.
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => match (url.find("://"), url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}://***{}", &url[..scheme], &url[at..])
            }
            _ => url.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact_url("postgres://fabro:s3cret-pw@db.internal:5432/fabro"),
            "postgres://fabro:***@db.internal:5432/fabro"
        );
        assert_eq!(
            redact_url("postgres://fabro@127.0.0.1/fabro"),
            "postgres://fabro@127.0.0.1/fabro"
        );
        assert_eq!(
            redact_url("postgres://user:pa ss@ho st/db"),
            "postgres://***@ho st/db"
        );
        assert_eq!(redact_url("s3://bucket/prefix"), "s3://bucket/prefix");
    }
}
