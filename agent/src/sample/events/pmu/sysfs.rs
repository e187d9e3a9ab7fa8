//! The PMUs the kernel exposes in `/sys/bus/event_source/devices`: perf type numbers, core or
//! not, `format/` options and `caps/max_precise`.

use super::*;

/// One PMU from `/sys/bus/event_source/devices/<name>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuInfo {
    /// Directory name, which is also the PMU name in perf event syntax.
    pub name: String,
    /// The `type` file: the number to put in `perf_event_attr.type`.
    pub type_: u32,
    /// Whether it counts events of the CPU cores: `cpu`, or any PMU with a `cpus` file
    /// (`cpu_core`/`cpu_atom` on hybrid Intel, `armv8_pmuv3_0`, `armv8_neoverse_n1`, …), the
    /// same test `perf` uses.
    pub is_core: bool,
    /// The option names in `format/` (e.g. `event`, `umask`, `cnt_ctl`, `l3missonly`), sorted.
    pub formats: Vec<String>,
    /// `caps/max_precise` (x86 only): the highest `precise_ip` the PMU accepts; 0 means no
    /// PEBS, as in many virtual machines.
    pub max_precise: Option<u8>,
}

impl PmuInfo {
    /// Whether `format/<attr>` exists, i.e. the kernel accepts that option for this PMU.
    pub fn has_format(&self, attr: &str) -> bool {
        self.formats.iter().any(|f| f == attr)
    }
}

/// The PMUs the kernel exposes, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pmus {
    by_name: BTreeMap<String, PmuInfo>,
    skipped: Vec<String>,
}

/// The PMU directory could not be listed.
#[derive(Debug)]
pub struct PmuError {
    /// The directory.
    pub path: PathBuf,
    /// What went wrong.
    pub source: io::Error,
}

impl fmt::Display for PmuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot list PMUs in {}: {}", self.path.display(), self.source)
    }
}

impl Error for PmuError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.source)
    }
}

impl Pmus {
    /// Where the kernel lists its PMUs.
    pub const SYSFS_DIR: &'static str = "/sys/bus/event_source/devices";

    /// Reads the PMUs of this machine from [`Pmus::SYSFS_DIR`].
    ///
    /// # Errors
    /// If the directory cannot be listed (no sysfs, or a kernel without perf events).
    pub fn read() -> Result<Pmus, PmuError> {
        Self::from_dir(Path::new(Self::SYSFS_DIR))
    }

    /// Reads PMUs from a directory laid out like [`Pmus::SYSFS_DIR`] (one subdirectory per
    /// PMU, each with a `type` file). Entries whose `type` is missing or not a number are
    /// skipped and listed in [`Pmus::skipped`]: one odd entry must not hide the others.
    ///
    /// # Errors
    /// If `root` cannot be listed.
    pub fn from_dir(root: &Path) -> Result<Pmus, PmuError> {
        let entries = fs::read_dir(root).map_err(|source| PmuError {
            path: root.to_path_buf(),
            source,
        })?;
        let mut pmus = Pmus::default();
        for entry in entries {
            let entry = entry.map_err(|source| PmuError {
                path: root.to_path_buf(),
                source,
            })?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            // Entries are symlinks into /sys/devices; joining follows them.
            let dir = entry.path();
            let type_ = fs::read_to_string(dir.join("type"))
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok());
            let Some(type_) = type_ else {
                pmus.skipped.push(name);
                continue;
            };
            let is_core = name == "cpu" || dir.join("cpus").exists();
            let mut formats: Vec<String> = fs::read_dir(dir.join("format"))
                .map(|rd| rd.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
                .unwrap_or_default();
            formats.sort();
            let max_precise = fs::read_to_string(dir.join("caps").join("max_precise"))
                .ok()
                .and_then(|t| t.trim().parse::<u8>().ok());
            pmus.by_name.insert(
                name.clone(),
                PmuInfo {
                    name,
                    type_,
                    is_core,
                    formats,
                    max_precise,
                },
            );
        }
        pmus.skipped.sort();
        Ok(pmus)
    }

    /// Builds the set from already known PMUs (for callers that learned them elsewhere).
    pub fn from_infos(infos: impl IntoIterator<Item = PmuInfo>) -> Pmus {
        Pmus {
            by_name: infos.into_iter().map(|p| (p.name.clone(), p)).collect(),
            skipped: Vec::new(),
        }
    }

    /// The PMU with this exact name.
    pub fn get(&self, name: &str) -> Option<&PmuInfo> {
        self.by_name.get(name)
    }

    /// The perf type number of the PMU with this exact name.
    pub fn type_of(&self, name: &str) -> Option<u32> {
        self.get(name).map(|p| p.type_)
    }

    /// All PMUs, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &PmuInfo> {
        self.by_name.values()
    }

    /// How many PMUs were found.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Whether no PMU was found.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Directory entries that were not PMUs (no readable numeric `type`).
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// Whether the kernel exposes any hardware PMU for the CPU cores.
    pub fn has_core_pmu(&self) -> bool {
        self.by_name.values().any(|p| p.is_core)
    }

    /// The core PMU events of this module are opened on: `cpu` (x86), else `cpu_core`
    /// (hybrid Intel: the P-cores, whose encodings match the server parts), else an
    /// `armv8*`/`armv9*` PMU, else any core PMU. Heterogeneous Arm systems have one PMU per
    /// core type; the first by name is taken, which is right for servers (one core type).
    pub fn core_pmu(&self) -> Option<&PmuInfo> {
        let core = || self.by_name.values().filter(|p| p.is_core);
        self.get("cpu")
            .or_else(|| self.get("cpu_core"))
            .filter(|p| p.is_core)
            .or_else(|| core().find(|p| p.name.starts_with("armv")))
            .or_else(|| core().next())
    }

    /// The first PMU (by name) called `prefix` or `prefix_<n>`, e.g. `arm_spe` → `arm_spe_0`.
    pub fn find_prefixed(&self, prefix: &str) -> Option<&PmuInfo> {
        self.by_name.values().find(|p| {
            p.name == prefix
                || p.name
                    .strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix('_'))
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    }
}
