//! Every field redis-server 7.0 writes in INFO, section by section in its order, with where the gateway takes
//! each one's value from (see docs/commands.md#introspection, which lists them).

/// Where a field's value comes from.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    /// The gateway's own, about itself or the tenant (given by `session::info`).
    Gateway,
    /// What Redis writes on an idle server: a figure the gateway has no counterpart of.
    Neutral(&'static str),
    /// The tenant's backends' (every shard, every cluster master), combined; the value when none answered.
    Backend(Combine, &'static str),
}

/// How the backends' values of one field make one value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Combine {
    /// The first backend's that has the field: for settings, identities and ratios.
    First,
    /// Added up: for amounts and counts.
    Sum,
    /// The largest: for flags ("in progress") and durations.
    Max,
    /// The smallest: for the time of the last save.
    Min,
    /// The first that is not `ok`, else `ok`.
    Status,
    /// The combined field named here, written as Redis writes sizes (`1.50M`).
    Human(&'static str),
}

/// One field of a section.
pub(crate) struct Field {
    pub name: &'static str,
    pub source: Source,
}

/// One section: its name (as asked for), its heading, whether `INFO`/`INFO default` shows it, whether it is the
/// gateway's own (shown only when asked for by name: `INFO all` and `everything` stay Redis'), its fields.
pub(crate) struct Section {
    pub name: &'static str,
    pub title: &'static str,
    pub default: bool,
    pub own: bool,
    pub fields: &'static [Field],
}

const fn gateway(name: &'static str) -> Field {
    Field {
        name,
        source: Source::Gateway,
    }
}

const fn neutral(name: &'static str, value: &'static str) -> Field {
    Field {
        name,
        source: Source::Neutral(value),
    }
}

const fn backend(name: &'static str, combine: Combine, none: &'static str) -> Field {
    Field {
        name,
        source: Source::Backend(combine, none),
    }
}

const fn first(name: &'static str, none: &'static str) -> Field {
    backend(name, Combine::First, none)
}

const fn sum(name: &'static str) -> Field {
    backend(name, Combine::Sum, "0")
}

const fn max(name: &'static str, none: &'static str) -> Field {
    backend(name, Combine::Max, none)
}

const fn status(name: &'static str) -> Field {
    backend(name, Combine::Status, "ok")
}

const fn human(name: &'static str, of: &'static str) -> Field {
    backend(name, Combine::Human(of), "0B")
}

const SERVER: &[Field] = &[
    gateway("redis_version"),
    neutral("redis_git_sha1", "00000000"),
    neutral("redis_git_dirty", "0"),
    neutral("redis_build_id", "0"),
    gateway("switchyard_version"),
    neutral("redis_mode", "standalone"),
    gateway("os"),
    gateway("arch_bits"),
    neutral("monotonic_clock", "POSIX clock_gettime"),
    neutral("multiplexing_api", "epoll"),
    neutral("atomicvar_api", "c11-builtin"),
    neutral("gcc_version", "0.0.0"),
    gateway("process_id"),
    neutral("process_supervised", "no"),
    gateway("run_id"),
    gateway("tcp_port"),
    gateway("server_time_usec"),
    gateway("uptime_in_seconds"),
    gateway("uptime_in_days"),
    neutral("hz", "10"),
    neutral("configured_hz", "10"),
    gateway("lru_clock"),
    gateway("executable"),
    neutral("config_file", ""),
    neutral("io_threads_active", "0"),
];

const CLIENTS: &[Field] = &[
    gateway("connected_clients"),
    neutral("cluster_connections", "0"),
    gateway("maxclients"),
    neutral("client_recent_max_input_buffer", "0"),
    neutral("client_recent_max_output_buffer", "0"),
    gateway("blocked_clients"),
    neutral("tracking_clients", "0"),
    neutral("clients_in_timeout_table", "0"),
];

const MEMORY: &[Field] = &[
    sum("used_memory"),
    human("used_memory_human", "used_memory"),
    sum("used_memory_rss"),
    human("used_memory_rss_human", "used_memory_rss"),
    sum("used_memory_peak"),
    human("used_memory_peak_human", "used_memory_peak"),
    first("used_memory_peak_perc", "0.00%"),
    sum("used_memory_overhead"),
    sum("used_memory_startup"),
    sum("used_memory_dataset"),
    first("used_memory_dataset_perc", "0.00%"),
    sum("allocator_allocated"),
    sum("allocator_active"),
    sum("allocator_resident"),
    first("total_system_memory", "0"),
    human("total_system_memory_human", "total_system_memory"),
    sum("used_memory_lua"),
    sum("used_memory_vm_eval"),
    human("used_memory_lua_human", "used_memory_lua"),
    sum("used_memory_scripts_eval"),
    first("number_of_cached_scripts", "0"),
    first("number_of_functions", "0"),
    first("number_of_libraries", "0"),
    sum("used_memory_vm_functions"),
    sum("used_memory_vm_total"),
    human("used_memory_vm_total_human", "used_memory_vm_total"),
    sum("used_memory_functions"),
    sum("used_memory_scripts"),
    human("used_memory_scripts_human", "used_memory_scripts"),
    sum("maxmemory"),
    human("maxmemory_human", "maxmemory"),
    first("maxmemory_policy", "noeviction"),
    first("allocator_frag_ratio", "1.00"),
    sum("allocator_frag_bytes"),
    first("allocator_rss_ratio", "1.00"),
    sum("allocator_rss_bytes"),
    first("rss_overhead_ratio", "1.00"),
    sum("rss_overhead_bytes"),
    first("mem_fragmentation_ratio", "1.00"),
    sum("mem_fragmentation_bytes"),
    sum("mem_not_counted_for_evict"),
    sum("mem_replication_backlog"),
    sum("mem_total_replication_buffers"),
    sum("mem_clients_slaves"),
    sum("mem_clients_normal"),
    sum("mem_cluster_links"),
    sum("mem_aof_buffer"),
    first("mem_allocator", "libc"),
    max("active_defrag_running", "0"),
    sum("lazyfree_pending_objects"),
    sum("lazyfreed_objects"),
];

const PERSISTENCE: &[Field] = &[
    max("loading", "0"),
    max("async_loading", "0"),
    max("current_cow_peak", "0"),
    max("current_cow_size", "0"),
    max("current_cow_size_age", "0"),
    first("current_fork_perc", "0.00"),
    sum("current_save_keys_processed"),
    sum("current_save_keys_total"),
    sum("rdb_changes_since_last_save"),
    max("rdb_bgsave_in_progress", "0"),
    backend("rdb_last_save_time", Combine::Min, "0"),
    status("rdb_last_bgsave_status"),
    first("rdb_last_bgsave_time_sec", "-1"),
    max("rdb_current_bgsave_time_sec", "-1"),
    sum("rdb_saves"),
    first("rdb_last_cow_size", "0"),
    sum("rdb_last_load_keys_expired"),
    sum("rdb_last_load_keys_loaded"),
    max("aof_enabled", "0"),
    max("aof_rewrite_in_progress", "0"),
    max("aof_rewrite_scheduled", "0"),
    first("aof_last_rewrite_time_sec", "-1"),
    max("aof_current_rewrite_time_sec", "-1"),
    status("aof_last_bgrewrite_status"),
    sum("aof_rewrites"),
    max("aof_rewrites_consecutive_failures", "0"),
    status("aof_last_write_status"),
    first("aof_last_cow_size", "0"),
    max("module_fork_in_progress", "0"),
    first("module_fork_last_cow_size", "0"),
];

const STATS: &[Field] = &[
    gateway("total_connections_received"),
    gateway("total_commands_processed"),
    neutral("instantaneous_ops_per_sec", "0"),
    gateway("total_net_input_bytes"),
    gateway("total_net_output_bytes"),
    sum("total_net_repl_input_bytes"),
    sum("total_net_repl_output_bytes"),
    neutral("instantaneous_input_kbps", "0.00"),
    neutral("instantaneous_output_kbps", "0.00"),
    first("instantaneous_input_repl_kbps", "0.00"),
    first("instantaneous_output_repl_kbps", "0.00"),
    gateway("rejected_connections"),
    sum("sync_full"),
    sum("sync_partial_ok"),
    sum("sync_partial_err"),
    sum("expired_keys"),
    first("expired_stale_perc", "0.00"),
    sum("expired_time_cap_reached_count"),
    sum("expire_cycle_cpu_milliseconds"),
    sum("evicted_keys"),
    neutral("evicted_clients", "0"),
    sum("total_eviction_exceeded_time"),
    max("current_eviction_exceeded_time", "0"),
    sum("keyspace_hits"),
    sum("keyspace_misses"),
    sum("pubsub_channels"),
    sum("pubsub_patterns"),
    sum("pubsubshard_channels"),
    max("latest_fork_usec", "0"),
    sum("total_forks"),
    sum("migrate_cached_sockets"),
    sum("slave_expires_tracked_keys"),
    sum("active_defrag_hits"),
    sum("active_defrag_misses"),
    sum("active_defrag_key_hits"),
    sum("active_defrag_key_misses"),
    sum("total_active_defrag_time"),
    max("current_active_defrag_time", "0"),
    neutral("tracking_total_keys", "0"),
    neutral("tracking_total_items", "0"),
    neutral("tracking_total_prefixes", "0"),
    sum("unexpected_error_replies"),
    gateway("total_error_replies"),
    sum("dump_payload_sanitizations"),
    neutral("total_reads_processed", "0"),
    neutral("total_writes_processed", "0"),
    neutral("io_threaded_reads_processed", "0"),
    neutral("io_threaded_writes_processed", "0"),
    neutral("reply_buffer_shrinks", "0"),
    neutral("reply_buffer_expands", "0"),
];

const REPLICATION: &[Field] = &[
    neutral("role", "master"),
    neutral("connected_slaves", "0"),
    neutral("master_failover_state", "no-failover"),
    first("master_replid", "0000000000000000000000000000000000000000"),
    first("master_replid2", "0000000000000000000000000000000000000000"),
    first("master_repl_offset", "0"),
    first("second_repl_offset", "-1"),
    first("repl_backlog_active", "0"),
    first("repl_backlog_size", "1048576"),
    first("repl_backlog_first_byte_offset", "0"),
    first("repl_backlog_histlen", "0"),
];

const CPU: &[Field] = &[
    gateway("used_cpu_sys"),
    gateway("used_cpu_user"),
    neutral("used_cpu_sys_children", "0.000000"),
    neutral("used_cpu_user_children", "0.000000"),
    gateway("used_cpu_sys_main_thread"),
    gateway("used_cpu_user_main_thread"),
];

/// The gateway's own section (not Redis'): the tenant's near cache on this gateway (docs/near-cache.md).
const NEAR_CACHE: &[Field] = &[
    gateway("near_cache_enabled"),
    gateway("near_cache_max_bytes"),
    gateway("near_cache_bytes"),
    gateway("near_cache_hits"),
    gateway("near_cache_misses"),
    gateway("near_cache_hit_ratio"),
    gateway("near_cache_invalidations"),
    gateway("near_cache_evictions"),
];

const fn section(name: &'static str, title: &'static str, fields: &'static [Field]) -> Section {
    Section {
        name,
        title,
        default: true,
        own: false,
        fields,
    }
}

/// Redis 7.0's sections in its order, then the gateway's own. `commandstats`, `errorstats`, `latencystats` and `keyspace` have fields
/// named after what they count (`cmdstat_get`, `errorstat_ERR`, `db0`): see `Lines`.
pub(crate) const SECTIONS: &[Section] = &[
    section("server", "Server", SERVER),
    section("clients", "Clients", CLIENTS),
    section("memory", "Memory", MEMORY),
    section("persistence", "Persistence", PERSISTENCE),
    section("stats", "Stats", STATS),
    section("replication", "Replication", REPLICATION),
    section("cpu", "CPU", CPU),
    section("modules", "Modules", &[]),
    Section {
        default: false,
        ..section("commandstats", "Commandstats", &[])
    },
    section("errorstats", "Errorstats", &[]),
    Section {
        default: false,
        ..section("latencystats", "Latencystats", &[])
    },
    section("cluster", "Cluster", &[neutral("cluster_enabled", "0")]),
    section("keyspace", "Keyspace", &[]),
    Section {
        default: false,
        own: true,
        ..section("nearcache", "Nearcache", NEAR_CACHE)
    },
];

/// The section whose lines come from the backends besides its fields.
pub(crate) const KEYSPACE: &str = "keyspace";
