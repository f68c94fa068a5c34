//! [`Compiler`]: NVRTC plus the kernel cache. Builds the NVRTC option list,
//! derives the cache key, compiles on a miss, and turns NVRTC rejections
//! into [`RuntimeError::Nvrtc`] with the source dumped to disk.
//!
//! Options always passed: `-arch=<sm_XX>` `-std=c++17` `-default-device`
//! `-lineinfo`, `--include-path=` for each toolkit include directory, then
//! `--use_fast_math` if requested, then the caller's extra flags.

use std::sync::OnceLock;
use std::time::Instant;

use crate::cache::{Artifacts, CacheKey, KernelCache};
use crate::error::{Result, RuntimeError};
use crate::loader::{self, NvrtcLibrary};
use crate::nvrtc::{self, CompileOptions, CompiledKernel, RawOutcome};
use crate::toolkit::Toolkit;

/// NVRTC + toolkit + cache.
#[derive(Debug)]
pub struct Compiler {
    toolkit: Toolkit,
    cache: KernelCache,
    nvrtc: NvrtcLibrary,
}

static GLOBAL: OnceLock<Compiler> = OnceLock::new();

impl Compiler {
    /// Loads NVRTC (preferring the toolkit's library) and wraps `cache`.
    pub fn new(toolkit: Toolkit, cache: KernelCache) -> Result<Compiler> {
        let nvrtc = loader::load_nvrtc(&toolkit)?;
        Ok(Compiler { toolkit, cache, nvrtc })
    }

    /// A compiler from the environment: [`Toolkit::discover`] and
    /// [`KernelCache::from_env`].
    pub fn from_env() -> Result<Compiler> {
        Self::new(Toolkit::discover(), KernelCache::from_env())
    }

    /// The process-wide compiler (created by [`Compiler::from_env`] on first
    /// success; a failure is returned and retried on the next call).
    pub fn global() -> Result<&'static Compiler> {
        if let Some(c) = GLOBAL.get() {
            return Ok(c);
        }
        let c = Self::from_env()?;
        Ok(GLOBAL.get_or_init(|| c))
    }

    /// The toolkit in use.
    pub fn toolkit(&self) -> &Toolkit {
        &self.toolkit
    }

    /// The cache in use.
    pub fn cache(&self) -> &KernelCache {
        &self.cache
    }

    /// The NVRTC library in use.
    pub fn nvrtc_library(&self) -> &NvrtcLibrary {
        &self.nvrtc
    }

    /// `nvrtcVersion()` as (major, minor).
    pub fn nvrtc_version(&self) -> (i32, i32) {
        self.nvrtc.version
    }

    /// The NVRTC options for a CUBIN compile with `opts`.
    pub fn nvrtc_options(&self, opts: &CompileOptions) -> Vec<String> {
        self.options_for_target(opts, &format!("-arch={}", opts.arch.sm_name()))
    }

    fn options_for_target(&self, opts: &CompileOptions, arch_flag: &str) -> Vec<String> {
        let mut o = vec![
            arch_flag.to_string(),
            "-std=c++17".to_string(),
            "-default-device".to_string(),
            "-lineinfo".to_string(),
        ];
        for dir in &self.toolkit.include_dirs {
            o.push(format!("--include-path={}", dir.display()));
        }
        if opts.fast_math {
            o.push("--use_fast_math".to_string());
        }
        o.extend(opts.extra_flags.iter().cloned());
        o
    }

    /// The cache key of compiling `source` with `opts`.
    pub fn cache_key(&self, source: &str, opts: &CompileOptions) -> CacheKey {
        let (major, minor) = self.nvrtc.version;
        let version = format!("nvrtc {major}.{minor}");
        let options = self.nvrtc_options(opts).join("\n");
        let emit_ptx = if opts.emit_ptx { "ptx" } else { "no-ptx" };
        CacheKey::from_parts(&[
            version.as_bytes(),
            options.as_bytes(),
            emit_ptx.as_bytes(),
            // The name as recorded, not the hint: entries from before
            // relative hints were placed under SOURCE_ROOT embed a working
            // directory, and must not be found.
            nvrtc::recorded_name(&opts.file_name_hint).as_bytes(),
            source.as_bytes(),
        ])
    }

    /// Compiles `source` to a CUBIN for `opts.arch` (and PTX if requested),
    /// through the cache. An NVRTC rejection is [`RuntimeError::Nvrtc`] with
    /// the source dumped next to the cache (or in the temp directory).
    pub fn compile(&self, source: &str, opts: &CompileOptions) -> Result<CompiledKernel> {
        let start = Instant::now();
        let key = self.cache_key(source, opts);
        let (artifacts, lookup) = self.cache.get_or_compile(&key, || self.compile_uncached(&key, source, opts))?;
        Ok(CompiledKernel {
            cubin: artifacts.cubin.clone(),
            ptx: artifacts.ptx.clone(),
            log: artifacts.log.clone(),
            compile_ms: start.elapsed().as_secs_f64() * 1e3,
            cache_hit: lookup.is_hit(),
            arch: opts.arch,
            key: key.hex(),
        })
    }

    /// Compiles several sources, each through the cache, on up to
    /// `available_parallelism` threads (NVRTC compiles distinct programs
    /// concurrently; the cache's writes are atomic). The results come back
    /// in the order of `jobs`: a block's cold compile then takes about as
    /// long as its slowest kernel rather than the sum of all.
    pub fn compile_many(&self, jobs: &[(&str, CompileOptions)]) -> Vec<Result<CompiledKernel>> {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, jobs.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let mut results: Vec<Option<Result<CompiledKernel>>> = jobs.iter().map(|_| None).collect();
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some((source, opts)) = jobs.get(i) else { break };
                            done.push((i, self.compile(source, opts)));
                        }
                        done
                    })
                })
                .collect();
            for worker in workers {
                match worker.join() {
                    Ok(done) => done.into_iter().for_each(|(i, r)| results[i] = Some(r)),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
        });
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(RuntimeError::InvalidInput("a compile job was not run".into()))))
            .collect()
    }

    fn rejected(&self, key: &CacheKey, source: &str, options: &[String], log: String) -> RuntimeError {
        match self.cache.dump_failed_source(key, source, options) {
            Ok(dumped_source) => RuntimeError::Nvrtc { log, dumped_source },
            Err(e) => RuntimeError::Nvrtc {
                log: format!("{log}\n(note: the source could not be dumped: {e})"),
                dumped_source: Default::default(),
            },
        }
    }

    fn compile_uncached(&self, key: &CacheKey, source: &str, opts: &CompileOptions) -> Result<Artifacts> {
        let name = if opts.file_name_hint.is_empty() { "codac_kernel.cu" } else { opts.file_name_hint.as_str() };
        let options = self.nvrtc_options(opts);
        let (cubin, mut ptx, log) = match nvrtc::compile_raw(source, name, &options, true, opts.emit_ptx)? {
            RawOutcome::Ok { cubin, ptx, log } => (cubin.unwrap_or_default(), ptx, log),
            RawOutcome::Rejected { log } => return Err(self.rejected(key, source, &options, log)),
        };
        if cubin.is_empty() {
            return Err(RuntimeError::NvrtcApi {
                call: "nvrtcGetCUBIN",
                code: format!("empty CUBIN for {} (is the arch supported?)", opts.arch),
            });
        }
        if opts.emit_ptx && ptx.is_none() {
            // A real-arch compile may not keep PTX: compile for the virtual arch.
            let arch_flag = format!("-arch={}", opts.arch.compute_name());
            let ptx_options = self.options_for_target(opts, &arch_flag);
            match nvrtc::compile_raw(source, name, &ptx_options, false, true)? {
                RawOutcome::Ok { ptx: p, .. } => ptx = p,
                RawOutcome::Rejected { log } => return Err(self.rejected(key, source, &ptx_options, log)),
            }
        }
        Ok(Artifacts { cubin, ptx, log })
    }
}

/// Compiles with the process-wide [`Compiler::global`].
pub fn compile(source: &str, opts: &CompileOptions) -> Result<CompiledKernel> {
    Compiler::global()?.compile(source, opts)
}

/// `nvrtcVersion()` of the process-wide NVRTC (loading it if needed).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    Compiler::global()?;
    nvrtc::version()
}
