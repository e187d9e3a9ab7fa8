/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one definition of what BPF programs hand to the agent. The agent reads these types
 * from the generated skeleton; never write a Rust twin by hand.
 */
#ifndef BIMODAL_SAMPLE_H
#define BIMODAL_SAMPLE_H

#define COMM_LEN 16
/* deepest stack recorded; frames past it are cut at the root end */
#define MAX_STACK_DEPTH 127

/* what a sample counts; names and numbers equal bimodal.v1.EventKind on the wire */
enum event_kind {
	EVENT_KIND_CPU = 1,
	EVENT_KIND_PAGE_FAULT = 2,
	EVENT_KIND_CACHE_MISS = 3,
	EVENT_KIND_REMOTE_ACCESS = 4,
	EVENT_KIND_NUMA_HINT_FAULT = 5,
	EVENT_KIND_PAGE_MIGRATION = 6,
	EVENT_KIND_COUNT = 7,
};

/* why a sample or part of it was lost; `drops` is indexed by event * DROP_REASON_COUNT + reason */
enum drop_reason {
	/* the sample map was full: the whole sample is lost */
	DROP_SAMPLE_MAP_FULL = 0,
	/* the user stack could not be stored (stack map full or hash collision) */
	DROP_USER_STACK = 1,
	/* the kernel stack could not be stored */
	DROP_KERNEL_STACK = 2,
	/* the data-address ring buffer was full: the sample is counted, its address lost */
	DROP_DATA_RING_FULL = 3,
	/*
	 * the stack-snapshot ring buffer was full: the sample is counted with its frame-pointer
	 * stack instead of an .eh_frame-unwound one
	 */
	DROP_SNAPSHOT_RING_FULL = 4,
	DROP_REASON_COUNT = 5,
};

#define DROPS_MAX_ENTRIES (EVENT_KIND_COUNT * DROP_REASON_COUNT)

/* what the agent knows of a sampled process (values of `sampled_processes`) */
enum process_state {
	/* sampled and told to the agent, not judged yet: unwound from stack copies meanwhile */
	PROCESS_NOTICED = 0,
	/* its executable keeps frame pointers: the kernel's frame-pointer stacks serve */
	PROCESS_FRAME_POINTERS = 1,
	/* its executable has none: unwound by the agent from stack copies (.eh_frame) */
	PROCESS_EH_FRAME = 2,
};

/* samples are counted per distinct key in kernel maps, drained every interval */
struct sample_key {
	__u32 tgid;
	__u32 pid;
	/* enum event_kind */
	__u32 event;
	/* ids in the `stacks` map; negative: no stack (errno from bpf_get_stackid) */
	__s32 user_stack_id;
	__s32 kernel_stack_id;
	char comm[COMM_LEN];
};

/* what the samples of one key add up to */
struct sample_value {
	/* samples taken */
	__u64 count;
	/* events they stand for: the sum of sample periods, or of pages for numa and migration */
	__u64 value;
};

/* a sample that carries the data address it touched, sent through the `data_samples` ring */
struct data_sample {
	__u32 tgid;
	__u32 pid;
	/* enum event_kind */
	__u32 event;
	__s32 user_stack_id;
	/* the data (virtual) address the event is about */
	__u64 address;
	/* events this sample stands for (its period) */
	__u64 weight;
};

/*
 * User stack bytes copied per snapshot: the rest of the page the stack pointer is in, then up to
 * this many whole pages above it. The agent unwinds the copy with .eh_frame (docs/design/006).
 */
#define SNAPSHOT_PAGE_SIZE 4096
#define SNAPSHOT_STACK_PAGES 2
#define SNAPSHOT_STACK_SIZE ((SNAPSHOT_STACK_PAGES + 1) * SNAPSHOT_PAGE_SIZE)

/*
 * A sample of a process without frame pointers, sent through the `stack_snapshots` ring: the
 * user registers and a copy of the top of the user stack, for the agent to unwind.
 */
struct stack_snapshot {
	__u32 tgid;
	__u32 pid;
	/* enum event_kind */
	__u32 event;
	/* id in the `stacks` map; negative: no kernel stack */
	__s32 kernel_stack_id;
	/* events this sample stands for (its period, or pages) */
	__u64 weight;
	/* the data address of the event; 0 when it has none or none is wanted */
	__u64 address;
	/* user registers when the sample was taken (or the task last entered the kernel) */
	__u64 ip;
	__u64 sp;
	__u64 bp;
	/* bytes of `stack` copied from `sp` upwards */
	__u32 stack_len;
	char comm[COMM_LEN];
	__u8 stack[SNAPSHOT_STACK_SIZE];
};

#endif /* BIMODAL_SAMPLE_H */
