//! Which path device buffers take, agreed by every rank before the first device call: each rank
//! describes itself in a fixed `Probe` record (its `DTCOMM_CUDA` mode, whether NCCL loaded and
//! has `ncclSend`/`ncclRecv`, its device, its host), the records are all-gathered over dtcomm's own links, and every rank
//! runs the same pure `decide` on the same records, so all take the same path (or all fail
//! with the same words).

use std::fmt;

dt_rdzv_proto::wire_enum! {
    /// How device buffers are carried (`DTCOMM_CUDA`). Its `u8` value travels in the probe
    /// record every rank sends before the first device call.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum CudaMode: u8 {
        /// NCCL when every rank can use it, host staging otherwise (with one warning line).
        #[default]
        Auto = 1 => "auto" | "",
        /// NCCL, or fail saying which ranks cannot.
        Nccl = 2 => "nccl",
        /// Always host staging: copy to host memory, run the host collective, copy back.
        Stage = 3 => "stage" | "staging" | "host",
        /// Refuse device buffers.
        Off = 0 => "off" | "0" | "none",
    }
    const ALL;
    /// The name `DTCOMM_CUDA` takes.
    const fn name;
    const fn from_tag(code);
    /// Parses `DTCOMM_CUDA` in any case; the empty string is `Auto`.
    impl FromStr for "mode";
}

/// Bytes of an encoded [`Probe`].
pub(crate) const PROBE_LEN: usize = 256;
const MAGIC: &[u8; 4] = b"DTDV";

/// What one rank says about itself before the first device call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Probe {
    /// Its `DTCOMM_CUDA`.
    pub mode: CudaMode,
    /// Whether NCCL loaded there.
    pub nccl: bool,
    /// Whether that NCCL has `ncclSend`/`ncclRecv` ([`NcclApi::has_p2p`](super::NcclApi::has_p2p)).
    pub p2p: bool,
    /// The device of its buffers.
    pub device: i32,
    /// Its host's identity digest (ranks of one host may not share a GPU under NCCL).
    pub host: [u8; 16],
    /// Why NCCL cannot be used there (or what it is), cut to fit.
    pub note: String,
}

impl Probe {
    /// The fixed-size record.
    pub fn encode(&self) -> [u8; PROBE_LEN] {
        let mut r = [0u8; PROBE_LEN];
        r[..4].copy_from_slice(MAGIC);
        r[4] = self.mode as u8;
        r[5] = u8::from(self.nccl);
        r[6] = u8::from(self.p2p);
        r[8..12].copy_from_slice(&self.device.to_le_bytes());
        r[16..32].copy_from_slice(&self.host);
        let mut note = self.note.as_bytes();
        let room = PROBE_LEN - 32;
        if note.len() > room {
            let mut cut = room;
            while !self.note.is_char_boundary(cut) {
                cut -= 1;
            }
            note = &note[..cut];
        }
        r[32..32 + note.len()].copy_from_slice(note);
        r
    }

    /// A record back, or what is wrong with it.
    pub fn decode(r: &[u8]) -> Result<Probe, String> {
        if r.len() != PROBE_LEN || &r[..4] != MAGIC {
            return Err("not a device probe record (a different dtcomm version?)".into());
        }
        let mode = CudaMode::from_tag(r[4]).ok_or_else(|| format!("unknown mode tag {}", r[4]))?;
        let note = &r[32..];
        let end = note.iter().position(|b| *b == 0).unwrap_or(note.len());
        Ok(Probe {
            mode,
            nccl: r[5] != 0,
            p2p: r[6] != 0,
            device: i32::from_le_bytes(r[8..12].try_into().expect("4 bytes")),
            host: r[16..32].try_into().expect("16 bytes"),
            note: String::from_utf8_lossy(&note[..end]).into_owned(),
        })
    }
}

/// The path every rank takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DevicePath {
    /// Collectives NCCL has run on NCCL; the rest by host staging.
    Nccl,
    /// Every call by host staging.
    Stage,
}

impl fmt::Display for DevicePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DevicePath::Nccl => "nccl",
            DevicePath::Stage => "host staging",
        })
    }
}

/// Names ranks compactly: `0, 2 and 5` (at most eight, then a count).
fn ranks(list: &[usize]) -> String {
    let shown: Vec<String> = list.iter().take(8).map(|r| r.to_string()).collect();
    let more = list.len().saturating_sub(8);
    let mut s = shown.join(", ");
    if more > 0 {
        s.push_str(&format!(" and {more} more"));
    }
    s
}

/// What every rank agreed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Agreed {
    /// The path.
    pub path: DevicePath,
    /// On the NCCL path: whether every rank's NCCL has `ncclSend`/`ncclRecv`, so the calls
    /// planned as a point-to-point exchange (all-to-all(v), all-gather with per-rank counts,
    /// gather, scatter) run on NCCL; without, they are staged on every rank.
    pub p2p: bool,
    /// The reason, to log.
    pub why: String,
}

/// The path for these records (element `r` is rank `r`'s), with the reason to log, or the
/// error every rank reports. Pure: every rank gets the same answer from the same records.
pub(crate) fn decide(probes: &[Probe]) -> Result<Agreed, String> {
    let Some(first) = probes.first() else {
        return Err("no ranks".into());
    };
    let differ: Vec<String> = probes
        .iter()
        .enumerate()
        .filter(|(_, p)| p.mode != first.mode)
        .map(|(r, p)| format!("rank {r} has {}", p.mode))
        .collect();
    if !differ.is_empty() {
        return Err(format!(
            "ranks disagree on DTCOMM_CUDA: rank 0 has {}, {}",
            first.mode,
            differ.join(", ")
        ));
    }
    match first.mode {
        CudaMode::Off => {
            return Err("DTCOMM_CUDA=off: device buffers are refused".into());
        }
        CudaMode::Stage => return Ok(staged("DTCOMM_CUDA=stage".into())),
        CudaMode::Auto | CudaMode::Nccl => {}
    }
    let mut why: Vec<String> = Vec::new();
    let without: Vec<usize> = (0..probes.len()).filter(|&r| !probes[r].nccl).collect();
    if let Some(&r) = without.first() {
        why.push(format!(
            "rank{} {} cannot use NCCL (rank {r}: {})",
            if without.len() > 1 { "s" } else { "" },
            ranks(&without),
            probes[r].note
        ));
    }
    // NCCL refuses two ranks of one communicator on the same GPU ("duplicate GPU").
    let mut shared: Vec<String> = Vec::new();
    for (a, pa) in probes.iter().enumerate() {
        if let Some(b) =
            (0..a).find(|&b| probes[b].host == pa.host && probes[b].device == pa.device)
        {
            shared.push(format!("{b} and {a} (device {})", pa.device));
        }
    }
    if !shared.is_empty() {
        let n = shared.len();
        shared.truncate(4);
        why.push(format!(
            "ranks {}{} share a GPU, which NCCL refuses",
            shared.join(", "),
            if n > 4 {
                format!(" and {} more pairs", n - 4)
            } else {
                String::new()
            }
        ));
    }
    match (why.is_empty(), first.mode) {
        (true, _) => {
            let old: Vec<usize> = (0..probes.len()).filter(|&r| !probes[r].p2p).collect();
            let mut why = format!("every rank has NCCL ({})", first.note);
            if let Some(&r) = old.first() {
                why.push_str(&format!(
                    "; all_to_all, all_gather_v, gather and scatter are staged: the NCCL of \
                     rank{} {} has no ncclSend/ncclRecv (rank {r}: {})",
                    if old.len() > 1 { "s" } else { "" },
                    ranks(&old),
                    probes[r].note
                ));
            }
            Ok(Agreed {
                path: DevicePath::Nccl,
                p2p: old.is_empty(),
                why,
            })
        }
        (false, CudaMode::Nccl) => Err(format!("DTCOMM_CUDA=nccl but {}", why.join("; "))),
        (false, _) => Ok(staged(why.join("; "))),
    }
}

fn staged(why: String) -> Agreed {
    Agreed {
        path: DevicePath::Stage,
        p2p: false,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(mode: CudaMode, nccl: bool, device: i32, host: u8) -> Probe {
        Probe {
            mode,
            nccl,
            p2p: nccl,
            device,
            host: [host; 16],
            note: if nccl {
                "NCCL 2.30.3".into()
            } else {
                "libnccl.so.2 not found".into()
            },
        }
    }

    #[test]
    fn records_round_trip_and_long_notes_are_cut_on_a_character() {
        let mut p = probe(CudaMode::Nccl, true, 7, 3);
        p.note = "é".repeat(200);
        let back = Probe::decode(&p.encode()).unwrap();
        assert_eq!(
            (back.mode, back.nccl, back.p2p, back.device, back.host),
            (p.mode, true, true, 7, [3; 16])
        );
        p.p2p = false;
        assert!(!Probe::decode(&p.encode()).unwrap().p2p);
        assert!(back.note.len() <= PROBE_LEN - 32 && back.note.chars().all(|c| c == 'é'));
        assert!(Probe::decode(&[0u8; PROBE_LEN]).is_err());
    }

    #[test]
    fn nccl_when_every_rank_has_it_on_its_own_gpu() {
        let ps: Vec<_> = (0..4)
            .map(|r| probe(CudaMode::Auto, true, r % 2, r as u8 / 2))
            .collect();
        let agreed = decide(&ps).unwrap();
        assert_eq!((agreed.path, agreed.p2p), (DevicePath::Nccl, true));
    }

    #[test]
    fn one_rank_without_ncclsend_stages_the_exchanges_on_every_rank() {
        let mut ps: Vec<_> = (0..4).map(|r| probe(CudaMode::Nccl, true, r, 0)).collect();
        ps[2].p2p = false;
        ps[2].note = "NCCL 2.6.4".into();
        let agreed = decide(&ps).unwrap();
        assert_eq!((agreed.path, agreed.p2p), (DevicePath::Nccl, false));
        assert!(
            agreed
                .why
                .ends_with("the NCCL of rank 2 has no ncclSend/ncclRecv (rank 2: NCCL 2.6.4)"),
            "{}",
            agreed.why
        );
    }

    #[test]
    fn auto_stages_when_a_rank_lacks_nccl_or_gpus_are_shared_and_says_why() {
        let mut ps: Vec<_> = (0..3).map(|r| probe(CudaMode::Auto, true, r, 0)).collect();
        ps[2] = probe(CudaMode::Auto, false, 2, 0);
        let Agreed { path, why, .. } = decide(&ps).unwrap();
        assert_eq!(path, DevicePath::Stage);
        assert!(
            why.contains("rank 2 cannot use NCCL (rank 2: libnccl.so.2 not found)"),
            "{why}"
        );
        let ps: Vec<_> = (0..3).map(|_| probe(CudaMode::Auto, true, 0, 0)).collect();
        let Agreed { path, why, .. } = decide(&ps).unwrap();
        assert_eq!(path, DevicePath::Stage);
        assert!(
            why.contains("ranks 0 and 1 (device 0), 0 and 2 (device 0) share a GPU"),
            "{why}"
        );
    }

    #[test]
    fn nccl_mode_fails_instead_of_staging_and_modes_must_agree() {
        let mut ps: Vec<_> = (0..2).map(|r| probe(CudaMode::Nccl, true, r, 0)).collect();
        ps[1].nccl = false;
        let e = decide(&ps).unwrap_err();
        assert!(
            e.starts_with("DTCOMM_CUDA=nccl but rank 1 cannot use NCCL"),
            "{e}"
        );
        ps[1].mode = CudaMode::Stage;
        let e = decide(&ps).unwrap_err();
        assert_eq!(
            e,
            "ranks disagree on DTCOMM_CUDA: rank 0 has nccl, rank 1 has stage"
        );
        let ps: Vec<_> = (0..2).map(|r| probe(CudaMode::Stage, true, r, 0)).collect();
        assert_eq!(decide(&ps).unwrap().path, DevicePath::Stage);
        let ps: Vec<_> = (0..2).map(|r| probe(CudaMode::Off, true, r, 0)).collect();
        assert!(decide(&ps).unwrap_err().contains("refused"));
    }

    #[test]
    fn cuda_mode_table_round_trips() {
        let mut tags = std::collections::HashSet::new();
        assert_eq!(CudaMode::SPELLINGS.len(), CudaMode::ALL.len());
        for (&(m, spellings), all) in CudaMode::SPELLINGS.iter().zip(CudaMode::ALL) {
            assert_eq!(m, all);
            assert!(tags.insert(m as u8), "{m:?}: tag {} twice", m as u8);
            assert_eq!(CudaMode::from_tag(m as u8), Some(m));
            assert_eq!(spellings[0], m.to_string());
            for s in spellings {
                assert_eq!(s.parse::<CudaMode>(), Ok(m), "{s}");
                assert_eq!(s.to_ascii_uppercase().parse::<CudaMode>(), Ok(m), "{s}");
            }
        }
        let wire = [
            CudaMode::Off,
            CudaMode::Auto,
            CudaMode::Nccl,
            CudaMode::Stage,
        ];
        assert_eq!(wire.map(|m| m as u8), [0, 1, 2, 3]);
        assert_eq!(CudaMode::from_tag(4), None);
        assert_eq!(CudaMode::default(), CudaMode::Auto);
        assert_eq!(
            "GPU".parse::<CudaMode>(),
            Err("unknown mode \"gpu\" (auto, nccl, stage, off)".to_string())
        );
    }
}
