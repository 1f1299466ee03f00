//! `kinformer new`: writes a plugin project that builds as written, in Rust,
//! Python or JavaScript: a plugin that logs the deltas it receives (or a
//! controller that logs each object it reconciles), its build,
//! the WIT contract (a copy, or for Rust the SDK that binds it), a manifest
//! granting it pods in every namespace (a comment says how to narrow it),
//! and a README of three commands.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A `cdylib` crate on `kinformer-sdk`, built with cargo for `wasm32-wasip2`.
    Rust,
    /// An `app.py` on the Python SDK, built with componentize-py.
    Python,
    /// An `app.js` on the JavaScript SDK, built with componentize-js.
    JavaScript,
}

impl std::str::FromStr for Language {
    type Err = anyhow::Error;

    fn from_str(language: &str) -> anyhow::Result<Self> {
        match language {
            "rust" => Ok(Self::Rust),
            "python" | "py" => Ok(Self::Python),
            "js" | "javascript" => Ok(Self::JavaScript),
            other => anyhow::bail!("unknown language {other:?}: want rust, python or js"),
        }
    }
}

/// What a new project is: a plugin that handles deltas, or a controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum World {
    /// The `plugin` world: `init` and `handle`.
    #[default]
    Plugin,
    /// The `controller` world: `init` and `reconcile`.
    Controller,
}

impl std::str::FromStr for World {
    type Err = anyhow::Error;

    fn from_str(world: &str) -> anyhow::Result<Self> {
        match world {
            "plugin" => Ok(Self::Plugin),
            "controller" => Ok(Self::Controller),
            other => anyhow::bail!("unknown world {other:?}: want plugin or controller"),
        }
    }
}

impl World {
    /// What its README says it is, and what it does.
    fn described(self) -> (&'static str, &'static str) {
        match self {
            Self::Plugin => ("plugin", "logs every delta of the resources its config names"),
            Self::Controller => (
                "controller",
                "reconciles every object of the resource its config names, logging each",
            ),
        }
    }
}

/// Where a new Rust plugin takes `kinformer-sdk` from.
#[derive(Debug, Clone)]
pub enum SdkSource {
    /// A checkout of kinformer: the SDK at `guest-sdk/` under it.
    Path(PathBuf),
    /// The kinformer repository.
    Git,
}

impl SdkSource {
    /// The checkout this binary was built from, if it is still there; else
    /// the repository.
    #[must_use]
    pub fn detect() -> Self {
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk");
        match sdk.canonicalize() {
            Ok(sdk) if sdk.join("Cargo.toml").is_file() => Self::Path(sdk),
            _ => Self::Git,
        }
    }

    fn dependency(&self) -> String {
        match self {
            Self::Path(sdk) => format!("{{ path = {:?} }}", sdk.display().to_string()),
            Self::Git => format!("{{ git = \"{}\" }}", env!("CARGO_PKG_REPOSITORY")),
        }
    }
}

const WIT: &str = include_str!("../../../wit/kinformer.wit");
const WIT_0_2: &str = include_str!("../../../wit/0.2.0/kinformer.wit");
const PYTHON_SDK: &str = include_str!("../../../guest-sdk/python/kinformer/__init__.py");
const PYTHON_CLUSTER: &str = include_str!("../../../guest-sdk/python/kinformer/cluster.py");
const PYTHON_HTTP: &str = include_str!("../../../guest-sdk/python/kinformer/http.py");
/// The WIT of `wasi:http/outgoing-handler` and the WASI packages it uses,
/// which the Python build imports for `kinformer.http` and the JavaScript
/// build for `process.env`.
const WASI_WIT: [(&str, &str); 7] = [
    ("cli.wit", include_str!("../../../guest-sdk/wasi/cli.wit")),
    ("clocks.wit", include_str!("../../../guest-sdk/wasi/clocks.wit")),
    ("filesystem.wit", include_str!("../../../guest-sdk/wasi/filesystem.wit")),
    ("http.wit", include_str!("../../../guest-sdk/wasi/http.wit")),
    ("io.wit", include_str!("../../../guest-sdk/wasi/io.wit")),
    ("random.wit", include_str!("../../../guest-sdk/wasi/random.wit")),
    ("sockets.wit", include_str!("../../../guest-sdk/wasi/sockets.wit")),
];
const PYTHON_BUILD: &str = include_str!("../../../guest-sdk/python/build");
const JS_SDK: &str = include_str!("../../../guest-sdk/js/kinformer.js");
const JS_BUILD: &str = include_str!("../../../guest-sdk/js/build");
const JS_PACKAGE: &str = include_str!("../../../guest-sdk/js/package.json");
const JS_LOCK: &str = include_str!("../../../guest-sdk/js/package-lock.json");

/// Writes the project of plugin `name` in `language`, of `world`, into the
/// new directory `dir`; returns the files written.
///
/// # Errors
///
/// When `name` is not a lowercase DNS label, `dir` exists already, or a file
/// cannot be written.
pub fn new_plugin(
    dir: &Path,
    name: &str,
    language: Language,
    world: World,
    sdk: &SdkSource,
) -> anyhow::Result<Vec<PathBuf>> {
    let valid = !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    anyhow::ensure!(
        valid,
        "bad plugin name {name:?}: want lowercase letters, digits and dashes, starting with a letter"
    );
    anyhow::ensure!(!dir.exists(), "{} exists already", dir.display());
    let (kind, what) = world.described();
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{build}}", &build_line(language, world, name))
            .replace("{{kind}}", kind)
            .replace("{{what}}", what)
    };
    let source = |plugin: &'static str, controller: &'static str| match world {
        World::Plugin => fill(plugin),
        World::Controller => fill(controller),
    };
    let mut files: Vec<(String, String, bool)> = vec![
        ("README.md".into(), fill(readme(language)), false),
        (format!("{name}.toml"), fill(include_str!("manifest.toml")), false),
        (".gitignore".into(), "/target\n/*.wasm\n__pycache__/\n".into(), false),
    ];
    match language {
        Language::Rust => {
            let cargo = fill(include_str!("rust/Cargo.toml")).replace("{{sdk}}", &sdk.dependency());
            files.push(("Cargo.toml".into(), cargo, false));
            let lib = source(include_str!("rust/lib.rs"), include_str!("rust/controller.rs"));
            files.push(("src/lib.rs".into(), lib, false));
        }
        Language::Python => {
            let app = source(include_str!("python/app.py"), include_str!("python/controller.py"));
            files.push(("app.py".into(), app, false));
            files.push(("wit/kinformer.wit".into(), WIT.into(), false));
            files.push(("wit/0.2.0/kinformer.wit".into(), WIT_0_2.into(), false));
            files.push(("sdk/build".into(), PYTHON_BUILD.into(), true));
            files.push(("sdk/kinformer/__init__.py".into(), PYTHON_SDK.into(), false));
            files.push(("sdk/kinformer/cluster.py".into(), PYTHON_CLUSTER.into(), false));
            files.push(("sdk/kinformer/http.py".into(), PYTHON_HTTP.into(), false));
            for (file, text) in WASI_WIT {
                files.push((format!("sdk/wasi/{file}"), text.into(), false));
            }
        }
        Language::JavaScript => {
            let app = source(include_str!("js/app.js"), include_str!("js/controller.js"));
            files.push(("app.js".into(), app, false));
            files.push(("wit/kinformer.wit".into(), WIT.into(), false));
            files.push(("wit/0.2.0/kinformer.wit".into(), WIT_0_2.into(), false));
            files.push(("sdk/build".into(), JS_BUILD.into(), true));
            files.push(("sdk/kinformer.js".into(), JS_SDK.into(), false));
            files.push(("sdk/package.json".into(), JS_PACKAGE.into(), false));
            files.push(("sdk/package-lock.json".into(), JS_LOCK.into(), false));
            for (file, text) in WASI_WIT {
                files.push((format!("sdk/wasi/{file}"), text.into(), false));
            }
        }
    }
    let mut written = Vec::new();
    for (path, text, executable) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        if executable {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
        written.push(path);
    }
    Ok(written)
}

fn readme(language: Language) -> &'static str {
    match language {
        Language::Rust => include_str!("rust/README.md"),
        Language::Python => include_str!("python/README.md"),
        Language::JavaScript => include_str!("js/README.md"),
    }
}

/// The shell command that builds the project of plugin `name` in `language`,
/// of `world`, into `NAME.wasm`, run in the project's directory (its README's
/// first).
#[must_use]
pub fn build_line(language: Language, world: World, name: &str) -> String {
    match (language, world) {
        (Language::Rust, _) => format!(
            "cargo build --release --target wasm32-wasip2 && cp \"${{CARGO_TARGET_DIR:-target}}/wasm32-wasip2/release/{}.wasm\" {name}.wasm",
            name.replace('-', "_")
        ),
        (Language::Python | Language::JavaScript, World::Plugin) => format!("sdk/build . {name}.wasm"),
        (Language::Python | Language::JavaScript, World::Controller) => {
            format!("sdk/build --world controller . {name}.wasm")
        }
    }
}
