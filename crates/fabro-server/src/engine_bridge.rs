//! Everything the server asks of the engine, in one place: its policy for new and
//! resumed runs (the roots, uploaded sources, the configuration layers of SPEC 12.3 with
//! `server.toml` between `.fabro/project.toml` and `settings.toml`) before the engine's
//! `start` and `resume`, and reading run records ([`records`]).

pub mod records;
mod repository;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use fabro_engine::configuration::{
    self, ConfigOverrides, ConfigReader, ConfigSources, FsConfigReader, RunConfig,
};
use fabro_engine::{
    fork, resume, rewind, start, ForkRequest as EngineForkRequest, FsLoader, Interviewer,
    Overrides, PreparedRun, ResumeRequest as EngineResumeRequest,
    RewindRequest as EngineRewindRequest, Rewound, RunError, RunId, RunOrigin, StagePoint,
    StartRequest as EngineStartRequest, Stores,
};
use fabro_language::SourceLoader;

pub use fabro_api::{
    AnswerLabels, ConfigFile, ForkRequest, ResumeRequest, RewindRequest, StartRequest,
};
pub use fabro_engine::gate::{AnswerError, AnswerHandle, Question};
pub use fabro_engine::{
    agent_stages_elsewhere, steer_elsewhere, EventEnvelope, EventSink, RunEnd, RunReport,
    RunStatus, SteerError, SteeringQueue, SteeringSource, StoreInterviewer, WhenNoAgent,
};

use crate::error::{without_paths, ApiError, ErrorKind};

/// Largest `source` accepted in `POST /api/v1/runs` (SPEC 14.3).
pub const MAX_SOURCE_BYTES: usize = 4 * 1024 * 1024;

/// The budget flags of a request (SPEC 17.1) and `--no-in-place` as overrides of the
/// configuration, or 400 for a limit that is none.
fn overrides(
    (max_stages, max_tokens): (Option<u64>, Option<u64>),
    max_cost_usd: Option<f64>,
    max_duration: Option<&String>,
    no_in_place: bool,
) -> Result<ConfigOverrides, ApiError> {
    let max_cost = match max_cost_usd {
        Some(usd) => Some(configuration::CostLimit::new(usd).ok_or_else(|| {
            ApiError::bad_request(format!("max_cost_usd: {usd} is not an amount in USD"))
        })?),
        None => None,
    };
    if let Some(duration) = max_duration {
        if fabro_language::value::parse_duration(duration).is_none() {
            return Err(ApiError::bad_request(format!(
                "max_duration: '{duration}' is not a duration (examples: 90s, 30m, 2h)"
            )));
        }
    }
    Ok(ConfigOverrides {
        max_stages,
        max_tokens,
        max_cost,
        max_duration: max_duration.cloned(),
        refuse_dirty_worktree: no_in_place,
    })
}

/// `answers` as the engine takes them: (node, label) pairs, in order per node.
fn answer_pairs(answers: &BTreeMap<String, AnswerLabels>) -> Vec<(String, String)> {
    answers
        .iter()
        .flat_map(|(node, labels)| {
            labels
                .labels()
                .into_iter()
                .map(move |label| (node.clone(), label))
        })
        .collect()
}

/// The engine as the server uses it: the storage root, the configured roots and the
/// stores runs keep their records in.
#[derive(Debug, Clone)]
pub struct EngineBridge {
    root: PathBuf,
    roots: Vec<PathBuf>,
    stores: Stores,
}

impl EngineBridge {
    /// A bridge over the storage `root`, admitting paths under `roots` (canonical), with
    /// the file stores of `root` (SPEC 11).
    pub fn new(root: PathBuf, roots: Vec<PathBuf>) -> EngineBridge {
        let stores = Stores::local(&root);
        EngineBridge {
            root,
            roots,
            stores,
        }
    }

    /// The same bridge with runs recorded in `stores` (a database, memory: SPEC 18.1);
    /// their scratch directories stay under the storage root.
    pub fn with_stores(self, stores: Stores) -> EngineBridge {
        EngineBridge { stores, ..self }
    }

    /// The storage root (`{root}` of SPEC 11.1).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The stores runs keep their records in.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The configured roots.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Resolves `path` (symlinks included) and checks it lies inside a root: 403
    /// otherwise, 400 when it does not exist. The errors name it as `shown` (what the
    /// request said), not as the server's file system does.
    pub fn inside_roots(&self, path: &Path, shown: &str) -> Result<PathBuf, ApiError> {
        let resolved = fs_err::canonicalize(path)
            .map_err(|_| ApiError::bad_request(format!("{shown} does not exist")))?;
        if self.roots.iter().any(|root| resolved.starts_with(root)) {
            Ok(resolved)
        } else {
            Err(ApiError::forbidden(format!(
                "{shown} is outside the server's roots"
            )))
        }
    }

    /// PARSE to INITIALIZE of a new run (SPEC 4.1) for `request`; the run's gates that
    /// no answer or auto-approval covers ask `interviewer`.
    pub fn prepare_new(
        &self,
        request: &StartRequest,
        interviewer: Arc<dyn Interviewer>,
    ) -> Result<PreparedRun, ApiError> {
        // SPEC 18.3: a repository named by URL is checked out under the run's id.
        let run_id = match (&request.run_id, &request.repository) {
            (None, Some(_)) => Some(fabro_engine::new_run_id()),
            (run_id, _) => run_id.clone(),
        };
        let checkout = self.check_out(request, run_id.as_deref().unwrap_or_default())?;
        let made = checkout.is_some().then(|| run_id.clone()).flatten();
        let prepared = self.prepare_in(request, run_id, checkout, interviewer);
        if let (Err(_), Some(run_id)) = (&prepared, made) {
            self.remove_checkout(&run_id);
        }
        prepared
    }

    /// [`EngineBridge::prepare_new`] in the working directory of the request or in the
    /// `checkout` of its repository.
    fn prepare_in(
        &self,
        request: &StartRequest,
        run_id: Option<String>,
        checkout: Option<(PathBuf, fabro_engine::repository::RemoteRepository)>,
        interviewer: Arc<dyn Interviewer>,
    ) -> Result<PreparedRun, ApiError> {
        let limits = overrides(
            (request.max_stages, request.max_tokens),
            request.max_cost_usd,
            request.max_duration.as_ref(),
            request.no_in_place,
        )?;
        let (checkout_dir, repository) = checkout.unzip();
        let admit = |path: &Path, shown: &str| match &checkout_dir {
            Some(base) => repository::inside(base, path, shown),
            None => self.inside_roots(path, shown),
        };
        let work_dir = match (&checkout_dir, &request.work_dir) {
            (Some(checkout), _) => checkout.clone(),
            (None, Some(work_dir)) => self.inside_roots(Path::new(work_dir), work_dir)?,
            (None, None) => self
                .roots
                .first()
                .cloned()
                .ok_or_else(|| ApiError::forbidden("the server has no roots"))?,
        };
        // Errors name the workflow's files relative to the working directory.
        let shown_base = work_dir.clone();
        let (workflow_path, run_config, loader): (PathBuf, Option<PathBuf>, Box<dyn SourceLoader>) =
            match (&request.workflow, &request.source) {
                (Some(workflow), None) => {
                    let located = admit(&locate_workflow(&work_dir, workflow), workflow)?;
                    if !located.is_file() {
                        return Err(ApiError::bad_request(format!(
                            "{workflow} is not a workflow file"
                        )));
                    }
                    if located
                        .extension()
                        .is_some_and(|extension| extension == "toml")
                    {
                        let graph = configuration::workflow_graph(&located, &FsConfigReader)
                            .map_err(config_error)?;
                        (
                            admit(&graph, &without_paths(&graph.display().to_string()))?,
                            Some(located),
                            Box::new(FsLoader),
                        )
                    } else {
                        (located, None, Box::new(FsLoader))
                    }
                }
                (None, Some(source)) => {
                    let path = self.store_source(source)?;
                    let loader = RebasedLoader {
                        from: path.parent().map(Path::to_path_buf).unwrap_or_default(),
                        to: work_dir.clone(),
                    };
                    (path, None, Box::new(loader))
                }
                _ => {
                    return Err(ApiError::bad_request(
                        "give exactly one of 'workflow' and 'source'",
                    ))
                }
            };
        // `--config` comes before a TOML workflow (SPEC 12.3), as in `fabro run`.
        let config_file = request.config.as_ref().map(|file| ClientConfig {
            path: work_dir.join(&file.path),
            text: file.text.clone(),
        });
        let run_configs = config_file
            .iter()
            .map(|file| file.path.clone())
            .chain(run_config)
            .collect();
        let config = self.run_config(&workflow_path, run_configs, config_file.as_ref())?;
        let source_file = request.source.is_some().then(|| workflow_path.clone());
        let engine_request = EngineStartRequest {
            fabro_home: self.root.clone(),
            workflow_path,
            loader: loader.as_ref(),
            config,
            goal: request.goal.clone(),
            vars: request.vars.clone(),
            dry_run: request.dry_run,
            run_id,
            work_dir: Some(work_dir),
            detached_worker: false,
            origin: RunOrigin::Server,
            overrides: Overrides {
                model: request.model.clone(),
                provider: request.provider.clone(),
                auto_approve: request.auto_approve,
                answers: answer_pairs(&request.answers),
                limits,
                interviewer: Some(interviewer),
            },
            repository,
        };
        let prepared = start(self.stores.clone(), engine_request);
        // The run keeps its own copy (`graph.fabro`); the text sent is not kept.
        if let Some(path) = source_file {
            let _ = fs_err::remove_file(path);
        }
        prepared.map_err(|error| run_error(error, Some(&shown_base)))
    }

    /// Writes the DOT text of a `source` request where the run can read it.
    fn store_source(&self, source: &str) -> Result<PathBuf, ApiError> {
        if source.len() > MAX_SOURCE_BYTES {
            return Err(ApiError::too_large("source is larger than 4 MiB"));
        }
        let directory = self.root.join("server").join("sources");
        fs_err::create_dir_all(&directory).map_err(ApiError::internal)?;
        let path = directory.join(format!("{}.fabro", fabro_engine::new_run_id()));
        fs_err::write(&path, source).map_err(ApiError::internal)?;
        Ok(path)
    }

    /// Continues run `run_id` from its newest checkpoint (SPEC 8.7), with the records'
    /// workflow, goal, variables and configuration.
    pub fn prepare_resume(
        &self,
        run_id: &str,
        request: &ResumeRequest,
        interviewer: Arc<dyn Interviewer>,
    ) -> Result<PreparedRun, ApiError> {
        self.resume_with(run_id, request, interviewer)?
            .map_err(|error| run_error(error, None))
    }

    /// [`EngineBridge::prepare_resume`] with the engine's own error, for a worker that
    /// tells a run that already finished from one that cannot be resumed.
    pub fn resume_with(
        &self,
        run_id: &str,
        request: &ResumeRequest,
        interviewer: Arc<dyn Interviewer>,
    ) -> Result<Result<PreparedRun, RunError>, ApiError> {
        let limits = overrides(
            (request.max_stages, request.max_tokens),
            request.max_cost_usd,
            request.max_duration.as_ref(),
            false,
        )?;
        let repository = self.taken_over(run_id)?;
        let engine_request = EngineResumeRequest {
            fabro_home: self.root.clone(),
            history: None,
            repository,
            overrides: Overrides {
                model: request.model.clone(),
                provider: request.provider.clone(),
                auto_approve: request.auto_approve,
                answers: answer_pairs(&request.answers),
                limits,
                interviewer: Some(interviewer),
            },
        };
        Ok(resume(
            self.stores.clone(),
            &RunId::from(run_id),
            engine_request,
        ))
    }

    /// A fork of run `run_id` (SPEC 20.2) for `request`, with the run's configuration and
    /// the request's overrides; the fork's gates that no answer covers ask
    /// `interviewer`. An edited `workflow` must lie inside the roots.
    pub fn prepare_fork(
        &self,
        run_id: &str,
        request: &ForkRequest,
        interviewer: Arc<dyn Interviewer>,
    ) -> Result<PreparedRun, ApiError> {
        let limits = overrides(
            (request.max_stages, request.max_tokens),
            request.max_cost_usd,
            request.max_duration.as_ref(),
            false,
        )?;
        let at = stage_point(request.at.as_deref(), request.at_rank, ("at", "at_rank"))?;
        let workflow = match &request.workflow {
            Some(workflow) => {
                let base = self.roots.first().cloned().unwrap_or_default();
                let located = self.inside_roots(&base.join(workflow), workflow)?;
                if !located.is_file() {
                    return Err(ApiError::bad_request(format!(
                        "{workflow} is not a workflow file"
                    )));
                }
                Some(located)
            }
            None => None,
        };
        let engine_request = EngineForkRequest {
            fabro_home: self.root.clone(),
            at,
            run_id: request.run_id.clone(),
            workflow,
            loader: &FsLoader,
            detached_worker: false,
            origin: RunOrigin::Server,
            overrides: Overrides {
                model: request.model.clone(),
                provider: request.provider.clone(),
                auto_approve: request.auto_approve,
                answers: answer_pairs(&request.answers),
                limits,
                interviewer: Some(interviewer),
            },
        };
        fork(self.stores.clone(), &RunId::from(run_id), engine_request)
            .map_err(|error| run_error(error, self.roots.first().map(PathBuf::as_path)))
    }

    /// Moves run `run_id` back to the checkpoint after the stage `request` names (SPEC
    /// 20.3).
    pub fn rewind(&self, run_id: &str, request: &RewindRequest) -> Result<Rewound, ApiError> {
        let to = stage_point(request.to.as_deref(), request.to_rank, ("to", "to_rank"))?
            .ok_or_else(|| ApiError::bad_request("give one of 'to' and 'to_rank'"))?;
        let engine_request = EngineRewindRequest {
            fabro_home: self.root.clone(),
            to,
        };
        rewind(&self.stores, &RunId::from(run_id), engine_request).map_err(ApiError::from)
    }

    /// The file layers of SPEC 12.3 for a run the server starts: run config >
    /// `.fabro/project.toml` > `{root}/server.toml` (without its `[server]` table) >
    /// `{root}/settings.toml`.
    fn run_config(
        &self,
        workflow: &Path,
        run_configs: Vec<PathBuf>,
        client: Option<&ClientConfig>,
    ) -> Result<RunConfig, ApiError> {
        // `load` with a root that holds no settings file reads the upper layers only.
        let sources = ConfigSources {
            root: self.root.join("server").join("no-settings"),
            workflow: workflow.to_path_buf(),
            run_configs,
        };
        let reader = ClientConfigReader { client };
        let upper = configuration::load(&sources, &reader).map_err(config_error)?;
        let settings = read_layer(&self.root.join("settings.toml"), &[])?;
        let server = read_layer(
            &crate::settings::server_toml(&self.root),
            crate::settings::SERVER_TABLES,
        )?;
        Ok(upper.over(server.over(settings)))
    }
}

/// The `--config` file a client sent, at its path.
struct ClientConfig {
    path: PathBuf,
    text: String,
}

/// Reads the client's `--config` file from the request, every other layer from disk.
struct ClientConfigReader<'a> {
    client: Option<&'a ClientConfig>,
}

impl ConfigReader for ClientConfigReader<'_> {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        match self.client {
            Some(client) if client.path == path => Ok(client.text.clone()),
            _ => FsConfigReader.read(path),
        }
    }
}

/// A bare name is `.fabro/workflows/{name}/workflow.fabro` under the nearest ancestor
/// of `work_dir` holding `.fabro/`; anything else is a path relative to `work_dir`.
fn locate_workflow(work_dir: &Path, workflow: &str) -> PathBuf {
    let argument = Path::new(workflow);
    let direct = work_dir.join(argument);
    let bare = argument.components().count() == 1 && argument.extension().is_none();
    if direct.exists() || !bare {
        return direct;
    }
    work_dir
        .ancestors()
        .find(|directory| directory.join(".fabro").is_dir())
        .map(|directory| {
            directory
                .join(".fabro/workflows")
                .join(argument)
                .join("workflow.fabro")
        })
        .unwrap_or(direct)
}

/// The stage a fork or rewind request names: a node (`NODE[@VISIT]`) or a rank, not
/// both (400); `None` when neither.
fn stage_point(
    node: Option<&str>,
    rank: Option<u32>,
    (node_field, rank_field): (&str, &str),
) -> Result<Option<StagePoint>, ApiError> {
    match (node, rank) {
        (Some(_), Some(_)) => Err(ApiError::bad_request(format!(
            "give one of '{node_field}' and '{rank_field}', not both"
        ))),
        (Some(node), None) => Ok(Some(StagePoint::parse_node(node))),
        (None, Some(rank)) => Ok(Some(StagePoint::Rank(rank))),
        (None, None) => Ok(None),
    }
}

/// The providers a run started by the server of `root` may name (SPEC 10.1, 10.7):
/// the built-in ones, the presets and those configured in the server's own layers
/// (`server.toml`, `settings.toml`); an unreadable layer offers the rest.
pub fn offered_providers(root: &Path) -> Vec<String> {
    let settings = read_layer(&root.join("settings.toml"), &[]).unwrap_or_default();
    let server = read_layer(
        &crate::settings::server_toml(root),
        crate::settings::SERVER_TABLES,
    )
    .unwrap_or_default();
    fabro_engine::configuration::known_provider_names(&server.over(settings).llm)
}

/// One configuration file as a layer; `without` names the tables that are not part of the
/// run configuration schema (`[server]`, `[store]`). Absent files are empty layers.
fn read_layer(path: &Path, without: &[&str]) -> Result<RunConfig, ApiError> {
    let text = match FsConfigReader.read(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(RunConfig::default())
        }
        Err(error) => {
            return Err(ApiError::internal(format!(
                "cannot read {}: {error}",
                path.display()
            )))
        }
    };
    let text = if without.is_empty() {
        text
    } else {
        let mut document = text.parse::<toml::Table>().map_err(|error| {
            let file = without_paths(&path.display().to_string());
            ApiError::bad_request(format!("{file}: {}", error.message()))
        })?;
        for table in without {
            document.remove(*table);
        }
        toml::to_string(&document).map_err(ApiError::internal)?
    };
    configuration::parse(&text, path).map_err(config_error)
}

/// Configuration errors are the request's fault.
fn config_error(error: configuration::ConfigError) -> ApiError {
    ApiError::explained(ErrorKind::BadRequest, error)
}

/// Reads `@path` references of a `source` workflow against `work_dir`: paths under the
/// directory the source was stored in are read from the same place under `to`.
struct RebasedLoader {
    from: PathBuf,
    to: PathBuf,
}

impl SourceLoader for RebasedLoader {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        match path.strip_prefix(&self.from) {
            Ok(relative) => FsLoader.read(&self.to.join(relative)),
            Err(_) => FsLoader.read(path),
        }
    }

    fn home_dir(&self) -> Option<PathBuf> {
        FsLoader.home_dir()
    }
}

/// A run that could not be prepared, as an API error (SPEC 14.3): the engine's error
/// kind decides the status ([`ApiError`]'s `From`); an invalid workflow adds its
/// diagnostics, its file named relative to `work_dir` when it lies under it, else by
/// its file name.
fn run_error(error: RunError, work_dir: Option<&Path>) -> ApiError {
    match error {
        RunError::InvalidWorkflow {
            path,
            text,
            checked,
        } => {
            let shown = work_dir
                .and_then(|work_dir| path.strip_prefix(work_dir).ok())
                .map_or_else(
                    || without_paths(&path.display().to_string()),
                    |relative| relative.display().to_string(),
                );
            let diagnostics =
                records::diagnostics_of(Path::new(&shown), &text, &checked.diagnostics);
            ApiError::invalid_workflow(format!("workflow {shown} has errors"), diagnostics)
        }
        error => ApiError::from(error),
    }
}
