//! What a benchmark ran on: the CPU, the vector instructions it has, the kernel Candle's f32
//! matmul dispatches to (the `gemm` crate picks it at run time from the same features), the
//! thread count and the load. Without these, two runs of one commit on "the same kind" of
//! machine cannot be compared.

use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct MachineReport {
    pub cpu_model: String,
    pub logical_cpus: usize,
    /// Logical CPUs sharing cpu0's core (2 when the vCPUs are hyper-threads of one core).
    pub cpu0_core_siblings: usize,
    /// x86 features that decide the matmul kernel: avx2, fma, avx512f, avx512_bf16, amx_tile.
    pub isa: Vec<&'static str>,
    /// The f32 matmul micro-kernel family `gemm` dispatches to.
    pub gemm_f32_kernel: &'static str,
    /// Threads Candle's CPU ops use.
    pub threads: usize,
    /// 1-minute load average when the report was taken.
    pub load_1m: f64,
    /// Per-core L2 and shared L3 sizes in KiB, as the kernel's cache blocking sees them.
    pub l2_kib: Option<u64>,
    pub l3_kib: Option<u64>,
}

impl MachineReport {
    pub fn now() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .map_or("unknown".into(), |v| v.trim_start_matches([' ', '\t', ':']).to_owned());
        let flags: Vec<&str> = cpuinfo.lines().find_map(|l| l.strip_prefix("flags")).map_or(vec![], |v| v.split_whitespace().collect());
        let isa: Vec<&'static str> = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile"].into_iter().filter(|f| flags.contains(f)).collect();
        Self {
            cpu_model,
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu0_core_siblings: std::fs::read_to_string("/sys/devices/system/cpu/cpu0/topology/thread_siblings_list")
                .ok()
                .and_then(|list| cpu_list_len(&list))
                .unwrap_or(1),
            gemm_f32_kernel: gemm_f32_kernel(),
            isa,
            threads: candle_core::utils::get_num_threads(),
            load_1m: std::fs::read_to_string("/proc/loadavg").ok().and_then(|s| s.split_whitespace().next()?.parse().ok()).unwrap_or(f64::NAN),
            l2_kib: cache_kib(2),
            l3_kib: cache_kib(3),
        }
    }
}

/// This process's peak resident set (`VmHWM`) in MiB; `None` where /proc does not tell.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse::<f64>().ok()?;
    Some(kib / 1024.0)
}

/// The same runtime test `gemm` (built with `x86-v4`) makes before choosing its kernels.
fn gemm_f32_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "avx512f (16 f32 lanes)";
        }
        if std::arch::is_x86_feature_detected!("fma") {
            return "avx2+fma (8 f32 lanes)";
        }
        "scalar/sse"
    }
    #[cfg(target_arch = "aarch64")]
    {
        "neon"
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        "scalar"
    }
}

/// Number of CPUs in a sysfs list such as `0-1` or `0,2`.
fn cpu_list_len(list: &str) -> Option<usize> {
    let mut count = 0;
    for part in list.trim().split(',') {
        count += match part.split_once('-') {
            Some((a, b)) => b.parse::<usize>().ok()?.checked_sub(a.parse::<usize>().ok()?)? + 1,
            None => 1,
        };
    }
    Some(count)
}

fn cache_kib(level: u32) -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.flatten().find_map(|entry| {
        let read = |name: &str| std::fs::read_to_string(entry.path().join(name)).ok().map(|s| s.trim().to_owned());
        if read("level")? != level.to_string() || read("type")? == "Instruction" {
            return None;
        }
        read("size")?.strip_suffix('K')?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_count_ranges_and_singles() {
        assert_eq!(cpu_list_len("0-1\n"), Some(2));
        assert_eq!(cpu_list_len("0,4"), Some(2));
        assert_eq!(cpu_list_len("0-3,8-11"), Some(8));
        assert_eq!(cpu_list_len("3-1"), None);
    }
}
