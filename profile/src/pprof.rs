//! pprof (gzip-compressed `perftools.profiles.Profile`), the exchange format with `go tool
//! pprof` and other profilers. Values per sample: [samples count, event value].

use std::collections::HashMap;
use std::io::Write;

use bimodal_proto::pprof as pb;
use flate2::{write::GzEncoder, Compression};
use prost::Message;

use crate::{FrameKind, Profile};

#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

pub(crate) fn write(p: &Profile) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = pb::Profile {
        sample_type: vec![
            pb::ValueType {
                r#type: strings.get("samples"),
                unit: strings.get("count"),
            },
            pb::ValueType {
                r#type: strings.get(&p.event),
                unit: strings.get(&p.unit),
            },
        ],
        time_nanos: p.start_unix_nanos,
        duration_nanos: p.duration_nanos,
        period_type: Some(pb::ValueType {
            r#type: strings.get(&p.event),
            unit: strings.get(&p.unit),
        }),
        period: p.period as i64,
        default_sample_type: 1,
        ..Default::default()
    };

    // Mappings by (module, build id); functions by (name, module). Ids start at 1: 0 means none.
    let mut mappings: HashMap<(&str, &str), u64> = HashMap::new();
    let mut functions: HashMap<(String, &str), u64> = HashMap::new();
    for (i, f) in p.frames.iter().enumerate() {
        let mapping_id = if f.module.is_empty() {
            0
        } else {
            let next = mappings.len() as u64 + 1;
            *mappings
                .entry((f.module.as_str(), f.build_id.as_str()))
                .or_insert_with(|| {
                    out.mapping.push(pb::Mapping {
                        id: next,
                        filename: strings.get(&f.module),
                        build_id: strings.get(&f.build_id),
                        has_functions: true,
                        ..Default::default()
                    });
                    next
                })
        };
        let mut lines = Vec::new();
        if !f.function.is_empty() || f.kind == FrameKind::Process {
            let name = match f.kind {
                FrameKind::Kernel => format!("{} [kernel]", f.function),
                _ => f.function.clone(),
            };
            let next = functions.len() as u64 + 1;
            let function_id = *functions.entry((name.clone(), f.module.as_str())).or_insert_with(|| {
                let n = strings.get(&name);
                out.function.push(pb::Function {
                    id: next,
                    name: n,
                    system_name: n,
                    filename: strings.get(&f.module),
                    start_line: 0,
                });
                next
            });
            lines.push(pb::Line { function_id, line: 0 });
        }
        out.location.push(pb::Location {
            id: i as u64 + 1,
            mapping_id,
            address: f.address,
            line: lines,
            is_folded: false,
        });
    }

    let comm_key = strings.get("comm");
    for s in &p.samples {
        out.sample.push(pb::Sample {
            location_id: s.stack.iter().map(|&i| u64::from(i) + 1).collect(),
            value: vec![s.count as i64, s.value as i64],
            label: vec![pb::Label {
                key: comm_key,
                str: strings.get(&s.comm),
                ..Default::default()
            }],
        });
    }
    out.string_table = strings.table;

    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    gz.write_all(&out.encode_to_vec())
        .expect("writing to a Vec cannot fail");
    gz.finish().expect("writing to a Vec cannot fail")
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::{Frame, Sample};

    /// The encoding round-trips through prost: strings, locations and values are consistent.
    #[test]
    fn pprof_round_trips() {
        let mut p = Profile::new("page_fault", "count");
        let f = p.intern(Frame {
            kind: FrameKind::User,
            function: "touch_pages".into(),
            module: "/bin/fixture".into(),
            build_id: "abcd".into(),
            address: 0x1234,
            file_offset: 0x234,
            elf_address: 0,
        });
        p.samples.push(Sample {
            comm: "fixture".into(),
            stack: vec![f],
            count: 3,
            value: 300,
        });
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&p.to_pprof()[..])
            .read_to_end(&mut raw)
            .unwrap();
        let decoded = pb::Profile::decode(&raw[..]).unwrap();
        assert_eq!(decoded.string_table[0], "");
        assert_eq!(decoded.sample.len(), 1);
        assert_eq!(decoded.sample[0].value, vec![3, 300]);
        let loc = &decoded.location[decoded.sample[0].location_id[0] as usize - 1];
        let func = &decoded.function[loc.line[0].function_id as usize - 1];
        assert_eq!(decoded.string_table[func.name as usize], "touch_pages");
        let mapping = &decoded.mapping[loc.mapping_id as usize - 1];
        assert_eq!(decoded.string_table[mapping.build_id as usize], "abcd");
    }
}
