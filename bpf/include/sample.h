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
	/* no unwinder program loaded: the kernel walks its frame pointers (docs/design/030) */
	PROCESS_FRAME_POINTERS = 1,
	/* its unwind tables are in `unwind_processes`: unwound in the kernel (docs/design/014) */
	PROCESS_TABLES = 2,
};

/*
 * A process the agent should read (again), sent through `new_processes`: at its first sample,
 * or when its chain met code outside its entry's mappings or its entry is for another address
 * space (`mm`: the cookie the agent's entry must carry).
 */
struct new_process {
	__u32 tgid;
	__u32 _pad;
	__u64 mm;
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
	/* key of the user chain in `user_chains` when unwound from tables (then user_stack_id < 0)
	 */
	__u64 user_chain;
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
	/* key in `user_chains` when the user stack was unwound from tables */
	__u64 user_chain;
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

/*
 * Unwinding in the kernel from tables the agent compiles from each image's .eh_frame
 * (docs/design/014). A row says how to find the caller's frame from any address at or above its
 * `pc` up to the next row's: where the canonical frame address (CFA, the stack pointer before the
 * call) is, and where the caller's rbp was saved. The return address is always at CFA - 8
 * (x86-64).
 */
enum unwind_rule {
	/* no row covers the address (JIT code, a gap between functions): step with frame pointers
	 */
	UNWIND_RULE_FRAME_POINTER = 0,
	/* CFA = rsp + cfa_offset */
	UNWIND_RULE_CFA_RSP = 1,
	/* CFA = rbp + cfa_offset */
	UNWIND_RULE_CFA_RBP = 2,
	/* a lazy-binding PLT entry: CFA = rsp + 8, and 8 more once (ip & 15) >= cfa_offset */
	UNWIND_RULE_PLT = 3,
	/* the outermost frame (the return address is undefined): the chain ends here */
	UNWIND_RULE_END = 4,
};

/* one row of an image's table, in `unwind_rows`; rows of an image are sorted by pc */
struct unwind_row {
	/* first address the rule holds for, as the image states it (ELF virtual address) */
	__u32 pc;
	/* enum unwind_rule */
	__u8 rule;
	__u8 _pad;
	__s16 cfa_offset;
	/* the caller's rbp is saved at CFA + rbp_offset; 0: rbp is unchanged */
	__s16 rbp_offset;
	__u16 _pad2;
};

/* executable mappings of one process with unwind tables; past these, frame pointers serve */
#define UNWIND_MAX_MAPPINGS 128

/* one executable mapping of a process and the rows of its image */
struct unwind_mapping {
	/* addresses in the process: [start, end) */
	__u64 start;
	__u64 end;
	/* address in the process minus the address the image states */
	__u64 bias;
	/* the image's first row in `unwind_rows`, and how many; 0 rows: frame pointers */
	__u32 rows_start;
	__u32 rows_len;
};

/* the executable mappings of one process, sorted by start, in `unwind_processes` */
struct unwind_process {
	/* the address space they were read for (its mm_struct's address, a cookie): an entry
	 * read before an exec does not apply after it */
	__u64 mm;
	__u32 len;
	__u32 _pad;
	struct unwind_mapping mappings[UNWIND_MAX_MAPPINGS];
};

/* a user call chain unwound in the kernel (leaf first), in `user_chains` */
struct user_chain {
	__u32 len;
	/* the chain reached its outermost frame (not cut by a missing rule or an unreadable stack)
	 */
	__u32 complete;
	__u64 pcs[MAX_STACK_DEPTH];
};

#endif /* BIMODAL_SAMPLE_H */
