//! Runs on a repository named by URL (SPEC 18.3): the commit a request's ref names, the
//! tree a new run's workflow and configuration are read from, and the run's pushed refs
//! when a run is resumed or taken over. The mirrors are under the bridge's root (a
//! worker's `--state-dir`); git runs with this process's environment and configuration,
//! the only source of credentials.

use std::path::{Path, PathBuf};

use fabro_engine::repository::{without_credentials, Mirrors, RemoteRepository};
use fabro_engine::RunId;

use super::{EngineBridge, StartRequest};
use crate::error::ApiError;

impl EngineBridge {
    /// The mirrors of this process: `{root}/repositories`.
    pub fn mirrors(&self) -> Mirrors {
        Mirrors::new(self.root.join("repositories"))
    }

    /// Where a new run's tree is checked out while it is prepared: `{root}/checkouts/{id}`.
    fn checkout_dir(&self, run_id: &str) -> PathBuf {
        self.root.join("checkouts").join(run_id)
    }

    /// Removes what [`EngineBridge::check_out`] made for run `run_id`, if anything.
    pub fn remove_checkout(&self, run_id: &str) {
        let dir = self.checkout_dir(run_id);
        if dir.exists() {
            if let Err(error) = fs_err::remove_dir_all(&dir) {
                tracing::warn!(%run_id, %error, "cannot remove a run's checkout");
            }
        }
    }

    /// Replaces the ref of `request`'s repository by the commit it names now, so that
    /// a worker claiming the run later runs what was accepted; 400 when it cannot be
    /// fetched.
    pub fn pin_repository(&self, request: &mut StartRequest) -> Result<(), ApiError> {
        let Some(repository) = request.repository.as_mut() else {
            return Ok(());
        };
        refuse_credentials(&repository.url)?;
        let (_, commit) = self
            .mirrors()
            .resolve(&repository.url, repository.reference.as_deref())
            .map_err(|error| fetch_error(&error, &repository.url))?;
        repository.reference = Some(commit);
        Ok(())
    }

    /// The tree of `request`'s repository at its ref, checked out for run `run_id`, and
    /// the repository the run works on; 400 when it cannot be fetched.
    pub(super) fn check_out(
        &self,
        request: &StartRequest,
        run_id: &str,
    ) -> Result<Option<(PathBuf, RemoteRepository)>, ApiError> {
        let Some(spec) = &request.repository else {
            return Ok(None);
        };
        refuse_credentials(&spec.url)?;
        if request.work_dir.is_some() {
            return Err(ApiError::bad_request(
                "give 'repository' or 'work_dir', not both",
            ));
        }
        let (mirror, commit) = self
            .mirrors()
            .resolve(&spec.url, spec.reference.as_deref())
            .map_err(|error| fetch_error(&error, &spec.url))?;
        let dir = self.checkout_dir(run_id);
        self.remove_checkout(run_id);
        Mirrors::checkout(&mirror, &commit, &dir).map_err(ApiError::internal)?;
        let dir = fs_err::canonicalize(&dir).map_err(ApiError::internal)?;
        Ok(Some((
            dir,
            RemoteRepository {
                url: spec.url.clone(),
                mirror,
                commit,
                pushed: fabro_engine::repository::PushedRefs::default(),
            },
        )))
    }

    /// For a run whose manifest names a repository URL: this machine's mirror with the
    /// run's refs fetched from it (a takeover, SPEC 18.3). `None` for other runs.
    pub(super) fn taken_over(&self, run_id: &str) -> Result<Option<RemoteRepository>, ApiError> {
        let Ok(manifest) = self.stores.runs.read_manifest(&RunId::from(run_id)) else {
            // The engine says why the run cannot be resumed.
            return Ok(None);
        };
        let Some(url) = manifest.repository_url else {
            return Ok(None);
        };
        self.mirrors()
            .take_over(&url, run_id, manifest.base_sha.as_deref())
            .map(Some)
            .map_err(|error| {
                ApiError::internal(format!(
                    "cannot fetch run {run_id} from its repository: {}",
                    without_credentials(&fabro_engine::error_chain(&error), &url)
                ))
            })
    }
}

/// 400 for a URL with credentials (SPEC 18.3: they come from the workers' git
/// configuration, never from the API); the message does not repeat the URL.
fn refuse_credentials(url: &str) -> Result<(), ApiError> {
    if fabro_engine::repository::has_credentials(url) {
        return Err(ApiError::bad_request(
            "the repository URL carries credentials; give it without them and configure a \
             credential helper or SSH key on the workers",
        ));
    }
    Ok(())
}

/// A ref that cannot be fetched: the client's mistake or an unreachable remote, told
/// without the URL's credentials.
fn fetch_error(error: &fabro_engine::repository::GitError, url: &str) -> ApiError {
    ApiError::bad_request(without_credentials(&fabro_engine::error_chain(error), url))
}

/// Whether `path` lies inside `base` once resolved: a workflow inside a checkout.
pub(super) fn inside(base: &Path, path: &Path, shown: &str) -> Result<PathBuf, ApiError> {
    let resolved = fs_err::canonicalize(path)
        .map_err(|_| ApiError::bad_request(format!("{shown} does not exist")))?;
    if resolved.starts_with(base) {
        Ok(resolved)
    } else {
        Err(ApiError::forbidden(format!(
            "{shown} is outside the repository"
        )))
    }
}
