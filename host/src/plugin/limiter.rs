//! One memory budget per instance (`limits.memory-mib`): the sum of its
//! linear memories and tables, and of what the host holds for it.
//!
//! An instance may have several linear memories (a component of several core
//! modules, or one module with several): they share the budget, as do its
//! tables. What the host keeps on the instance's behalf counts too: the
//! `wasi:io` and `wasi:http` resources in its table (header fields with their
//! bytes, requests, responses, bodies and the buffers behind their streams,
//! pollables), at most [`MAX_RESOURCES`] of them. Their size is measured
//! after every host call that may have made one (cheap: the table of a
//! plugin holds a handful); growing memory past the budget fails, and a host
//! call that leaves the instance over it traps, counted as a memory failure
//! like a `memory.grow` past it.
//!
//! A resource's size is an upper bound where its buffer cannot be seen: an
//! output stream counts the body chunks it may hold, an input stream the
//! frame it may hold; header fields count their bytes, and every entry
//! [`ENTRY_BYTES`] besides.

use std::any::Any;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream};
use wasmtime_wasi_http::FieldMap;
use wasmtime_wasi_http::p2::types::{HostIncomingResponse, HostOutgoingRequest, HostOutgoingResponse};

/// The most resources one instance may hold in its table at once.
pub(crate) const MAX_RESOURCES: usize = 4096;
/// What each resource costs besides its contents: the table's slot, the box,
/// the resource's own struct.
pub(crate) const ENTRY_BYTES: usize = 256;
/// What one header field costs besides its name and value.
const FIELD_BYTES: usize = 32;
/// What one table element costs (a function reference).
const TABLE_ELEMENT_BYTES: usize = 8;
/// Instances, tables and memories one store may create: a component has a
/// few of each.
const MAX_INSTANCES: usize = 16;
const MAX_TABLES: usize = 16;
const MAX_MEMORIES: usize = 16;

/// The memory an instance holds, against its budget.
#[derive(Debug)]
pub(crate) struct Limiter {
    /// `limits.memory-mib`, in bytes.
    budget: usize,
    /// Bytes of linear memory, over all memories.
    pub(crate) memory_bytes: usize,
    /// Bytes of tables, over all tables.
    table_bytes: usize,
    /// Bytes the host holds for the instance, as last measured.
    host_bytes: usize,
    /// Resources in the table, as last measured.
    resources: usize,
}

impl Limiter {
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            budget,
            memory_bytes: 0,
            table_bytes: 0,
            host_bytes: 0,
            resources: 0,
        }
    }

    /// Everything counted against the budget.
    pub(crate) fn total(&self) -> usize {
        self.memory_bytes + self.table_bytes + self.host_bytes
    }

    /// Bytes the host holds for the instance, as last measured.
    #[cfg(test)]
    fn host_bytes(&self) -> usize {
        self.host_bytes
    }

    fn fits(&self, more: usize) -> bool {
        self.total().saturating_add(more) <= self.budget
    }

    /// What the instance holds, as an error says it.
    fn breakdown(&self) -> String {
        format!(
            "{} MiB of memory (limits.memory-mib): linear memory {} KiB, tables {} KiB, held by the host {} KiB in {} resources",
            self.budget >> 20,
            self.memory_bytes >> 10,
            self.table_bytes >> 10,
            self.host_bytes >> 10,
            self.resources,
        )
    }

    /// Measures what `table` holds; an error when that puts the instance
    /// over its budget.
    pub(crate) fn measure(&mut self, table: &mut ResourceTable) -> wasmtime::Result<()> {
        let (resources, bytes) = footprint(table);
        self.resources = resources;
        self.host_bytes = bytes;
        if self.total() > self.budget {
            return Err(wasmtime::format_err!("over its {}", self.breakdown()));
        }
        Ok(())
    }
}

impl ResourceLimiter for Limiter {
    /// Over the budget, the growth traps (an instance's creation fails):
    /// past its memory limit a plugin is stopped, not handed an allocation
    /// failure to mistake for something else.
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        let more = desired.saturating_sub(current);
        if !self.fits(more) {
            return Err(wasmtime::format_err!(
                "growing memory by {} KiB would take it over its {}",
                more >> 10,
                self.breakdown()
            ));
        }
        self.memory_bytes += more;
        Ok(true)
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context(format!("growing memory failed at {}", self.breakdown())))
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|maximum| desired > maximum) {
            return Ok(false);
        }
        let more = desired.saturating_sub(current).saturating_mul(TABLE_ELEMENT_BYTES);
        if !self.fits(more) {
            return Err(wasmtime::format_err!(
                "growing a table by {} elements would take it over its {}",
                desired.saturating_sub(current),
                self.breakdown()
            ));
        }
        self.table_bytes += more;
        Ok(true)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        Err(error.context(format!("growing a table failed at {}", self.breakdown())))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

/// The resources in `table` and the bytes they hold, by the bounds in this
/// module's header.
fn footprint(table: &mut ResourceTable) -> (usize, usize) {
    let mut resources = 0;
    let mut bytes = 0;
    for entry in table.iter_mut() {
        resources += 1;
        bytes += ENTRY_BYTES + contents(entry);
    }
    (resources, bytes)
}

fn contents(entry: &(dyn Any + Send)) -> usize {
    if let Some(fields) = entry.downcast_ref::<FieldMap>() {
        fields_bytes(fields)
    } else if let Some(request) = entry.downcast_ref::<HostOutgoingRequest>() {
        fields_bytes(&request.headers)
            + request.authority.as_ref().map_or(0, String::len)
            + request.path_with_query.as_ref().map_or(0, String::len)
    } else if let Some(response) = entry.downcast_ref::<HostIncomingResponse>() {
        fields_bytes(&response.headers)
    } else if let Some(response) = entry.downcast_ref::<HostOutgoingResponse>() {
        fields_bytes(&response.headers)
    } else if entry.is::<DynOutputStream>() {
        // The chunks a body's channel holds, and the one being written.
        2 * crate::outbound::OUTGOING_CHUNK_BYTES
    } else if entry.is::<DynInputStream>() {
        crate::outbound::RESPONSE_BUFFER_BYTES
    } else {
        0
    }
}

fn fields_bytes(fields: &FieldMap) -> usize {
    fields
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + FIELD_BYTES)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;

    #[test]
    fn every_memory_and_table_of_an_instance_shares_one_budget() {
        let mut limiter = Limiter::new(64 * MIB);
        assert!(limiter.memory_growing(0, 40 * MIB, None).unwrap());
        let error = limiter
            .memory_growing(0, 40 * MIB, None)
            .expect_err("a second memory of 40 MiB does not fit beside the first");
        assert!(
            error
                .to_string()
                .contains("over its 64 MiB of memory (limits.memory-mib): linear memory 40960 KiB"),
            "{error}"
        );
        assert!(limiter.memory_growing(0, 20 * MIB, None).unwrap());
        assert!(limiter.table_growing(0, MIB, None).is_err(), "8 MiB of table elements");
        assert!(limiter.table_growing(0, 1000, None).unwrap());
        assert!(
            !limiter.memory_growing(MIB, 2 * MIB, Some(MIB)).unwrap(),
            "past its own maximum"
        );
        assert_eq!(limiter.memory_bytes, 60 * MIB);
    }

    #[test]
    fn wasmtime_asks_one_budget_for_every_memory_of_an_instance() {
        let mut config = wasmtime::Config::new();
        config.wasm_multi_memory(true);
        let engine = wasmtime::Engine::new(&config).unwrap();
        // 600 pages are 37.5 MiB: one fits in 64 MiB, four do not.
        let instantiate = |memories: usize| {
            let text = format!("(module {})", "(memory 600) ".repeat(memories));
            let module = wasmtime::Module::new(&engine, wat::parse_str(&text).unwrap()).unwrap();
            let mut store = wasmtime::Store::new(&engine, Limiter::new(64 * MIB));
            store.limiter(|limiter| limiter);
            wasmtime::Instance::new(&mut store, &module, &[]).map(|_| store.data().memory_bytes)
        };
        assert_eq!(instantiate(1).unwrap(), 600 << 16);
        assert!(instantiate(2).is_err(), "two memories of 37.5 MiB");
        assert!(instantiate(4).is_err(), "four memories of 37.5 MiB");
    }

    #[test]
    fn resources_the_host_holds_count_against_the_budget() {
        let mut limiter = Limiter::new(MIB);
        let mut table = ResourceTable::new();
        let mut hooks = crate::outbound::Outbound::new(
            "test",
            crate::outbound::HttpGrant::default(),
            crate::outbound::AddressPolicy::default(),
            &crate::limits::Limits::default(),
            None,
        );
        limiter.measure(&mut table).unwrap();
        for _ in 0..8 {
            let mut fields = FieldMap::new_mutable(1 << 20);
            fields
                .append(&mut hooks, "x-big".into(), vec![b'a'; 100 * 1024])
                .unwrap();
            table.push(fields).unwrap();
        }
        limiter.measure(&mut table).unwrap();
        assert!(limiter.host_bytes() > 800 * 1024, "{}", limiter.host_bytes());
        assert!(
            limiter.memory_growing(0, 256 * 1024, None).is_err(),
            "linear memory cannot take what the host holds"
        );
        let mut fields = FieldMap::new_mutable(1 << 20);
        fields
            .append(&mut hooks, "x-big".into(), vec![b'a'; 300 * 1024])
            .unwrap();
        table.push(fields).unwrap();
        let over = limiter.measure(&mut table).unwrap_err();
        assert!(over.to_string().contains("in 9 resources"), "{over}");
    }
}
