//! WASI preview 1 stubs: a core module's `wasi_snapshot_preview1` function imports replaced by
//! functions inside the module itself, so that it becomes a component that imports nothing but
//! its world (no filesystem, network, clock, randomness, environment or stdio).
//!
//! For languages whose runtime always imports WASI preview 1 (Go's `GOOS=wasip1`: its
//! scheduler reads the clock, seeds its hash maps from `random_get`, prints panics with
//! `fd_write`). The stubs keep the module deterministic: the same calls on a fresh instance
//! give the same results.
//!
//! | import | stub |
//! |---|---|
//! | `args_get`, `environ_get` | nothing to write, success |
//! | `args_sizes_get`, `environ_sizes_get` | 0 arguments / variables of 0 bytes |
//! | `clock_time_get` | a virtual clock, the same for every clock id: it starts at 0 (the Unix epoch) and advances 1 µs per read |
//! | `clock_res_get` | 1 µs |
//! | `poll_oneoff` | returns at once, every subscription ready; a clock subscription advances the virtual clock by its timeout (so a sleep "passes" without waiting) |
//! | `random_get` | zero bytes (a fixed seed: Go's map order and `math/rand` are the same on every instance) |
//! | `fd_write` to 1 or 2 | the bytes are dropped, reported as written |
//! | `fd_write` to other descriptors | `EBADF` |
//! | `sched_yield` | success |
//! | `proc_exit` | traps (`unreachable`): the call fails, the host throws the instance away |
//! | other `fd_*`, `path_*` and `sock_*` functions (files, directories, sockets) | `EBADF`: there are no descriptors (no preopened directories either) |
//! | anything else returning an errno | `ENOSYS` |
//! | anything else | traps |

use wasm_encoder::reencode::{Error as ReencodeError, Reencode, RoundtripReencoder};
use wasm_encoder::{BlockType, ConstExpr, Function, GlobalType, MemArg, ValType};

/// The module name of WASI preview 1 imports.
pub const WASI_PREVIEW1: &str = "wasi_snapshot_preview1";

/// `errno` values of WASI preview 1.
const ESUCCESS: i32 = 0;
const EBADF: i32 = 8;
const ENOSYS: i32 = 52;

/// Nanoseconds the virtual clock advances per read.
const CLOCK_STEP_NANOS: i64 = 1_000;

/// Replaces every `wasi_snapshot_preview1` function import of `module` by a stub (see the
/// module documentation). A module without such imports is returned re-encoded but
/// otherwise unchanged.
///
/// # Errors
/// A message when the module does not parse, imports something other than functions from
/// `wasi_snapshot_preview1`, or needs the virtual clock but defines no memory.
pub fn stub_wasi(module: &[u8]) -> Result<Vec<u8>, String> {
    let plan = Plan::of(module)?;
    let mut out = wasm_encoder::Module::new();
    let mut stubber = Stubber { plan, sections: Default::default() };
    stubber
        .parse_core_module(&mut out, wasmparser::Parser::new(0), module)
        .map_err(|e| format!("rewriting the module: {e}"))?;
    let missing: Vec<&str> =
        [(stubber.sections.function, "function"), (stubber.sections.code, "code"), (stubber.sections.global, "global")]
            .into_iter()
            .filter(|(seen, _)| !seen)
            .map(|(_, name)| name)
            .collect();
    if !stubber.plan.stubs.is_empty() && !missing.is_empty() {
        return Err(format!("the module has no {} section to add the WASI stubs to", missing.join(", ")));
    }
    Ok(out.finish())
}

/// What the module holds and how its functions are renumbered.
struct Plan {
    /// Old function index → new one.
    functions: Vec<u32>,
    /// The stubs, in the order they are appended: (import name, type index, signature).
    stubs: Vec<(String, u32, Signature)>,
    /// Index of the virtual clock's global (appended after the module's globals).
    clock_global: u32,
}

/// The parameters and results of a function type.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Signature {
    params: Vec<ValType>,
    results: Vec<ValType>,
}

impl Plan {
    fn of(module: &[u8]) -> Result<Plan, String> {
        let parse = |e: wasmparser::BinaryReaderError| format!("not a core Wasm module: {e}");
        let mut types: Vec<Option<Signature>> = Vec::new();
        let mut imported: Vec<(bool, String, u32)> = Vec::new(); // (is WASI, name, type)
        let mut defined = 0u32;
        let mut globals = 0u32;
        let mut has_memory = false;
        for payload in wasmparser::Parser::new(0).parse_all(module) {
            match payload.map_err(parse)? {
                wasmparser::Payload::TypeSection(section) => {
                    for ty in section.into_iter_err_on_gc_types() {
                        let ty = ty.map_err(parse)?;
                        let mut valtype = |t: &wasmparser::ValType| RoundtripReencoder.val_type(*t).ok();
                        let params: Option<Vec<_>> = ty.params().iter().map(&mut valtype).collect();
                        let results: Option<Vec<_>> = ty.results().iter().map(&mut valtype).collect();
                        types.push(params.zip(results).map(|(params, results)| Signature { params, results }));
                    }
                }
                wasmparser::Payload::ImportSection(section) => {
                    for import in section.into_imports() {
                        let import = import.map_err(parse)?;
                        let wasi = import.module == WASI_PREVIEW1;
                        match import.ty {
                            wasmparser::TypeRef::Func(ty) | wasmparser::TypeRef::FuncExact(ty) => {
                                imported.push((wasi, import.name.to_string(), ty));
                            }
                            _ if wasi => {
                                return Err(format!("`{WASI_PREVIEW1}` `{}` is not a function", import.name));
                            }
                            wasmparser::TypeRef::Global(_) => globals += 1,
                            wasmparser::TypeRef::Memory(_) => has_memory = true,
                            _ => {}
                        }
                    }
                }
                wasmparser::Payload::FunctionSection(section) => defined = section.count(),
                wasmparser::Payload::GlobalSection(section) => globals += section.count(),
                wasmparser::Payload::MemorySection(section) => has_memory |= section.count() > 0,
                _ => {}
            }
        }
        let kept = imported.iter().filter(|(wasi, ..)| !wasi).count() as u32;
        let mut functions = Vec::with_capacity(imported.len() + defined as usize);
        let mut stubs = Vec::new();
        let mut next_kept = 0;
        for (wasi, name, ty) in imported {
            if wasi {
                let signature = types
                    .get(ty as usize)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| format!("`{WASI_PREVIEW1}` `{name}`: not a function type"))?;
                functions.push(kept + defined + stubs.len() as u32);
                stubs.push((name, ty, signature));
            } else {
                functions.push(next_kept);
                next_kept += 1;
            }
        }
        functions.extend((0..defined).map(|j| kept + j));
        if !stubs.is_empty() && !has_memory {
            return Err("the module has no memory for the WASI stubs to write to".into());
        }
        Ok(Plan { functions, stubs, clock_global: globals })
    }
}

/// Which sections the stubs were appended to.
#[derive(Default)]
struct Seen {
    function: bool,
    code: bool,
    global: bool,
}

struct Stubber {
    plan: Plan,
    sections: Seen,
}

impl Reencode for Stubber {
    type Error = String;

    fn function_index(&mut self, func: u32) -> Result<u32, ReencodeError<String>> {
        self.plan
            .functions
            .get(func as usize)
            .copied()
            .ok_or_else(|| ReencodeError::UserError(format!("function index {func} out of range")))
    }

    fn parse_import_section(
        &mut self,
        imports: &mut wasm_encoder::ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Result<(), ReencodeError<String>> {
        for import in section.into_imports() {
            let import = import?;
            if import.module != WASI_PREVIEW1 {
                imports.import(import.module, import.name, self.entity_type(import.ty)?);
            }
        }
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        functions: &mut wasm_encoder::FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), ReencodeError<String>> {
        for ty in section {
            functions.function(self.type_index(ty?)?);
        }
        for (_, ty, _) in &self.plan.stubs {
            functions.function(*ty);
        }
        self.sections.function = true;
        Ok(())
    }

    fn parse_global_section(
        &mut self,
        globals: &mut wasm_encoder::GlobalSection,
        section: wasmparser::GlobalSectionReader<'_>,
    ) -> Result<(), ReencodeError<String>> {
        for global in section {
            self.parse_global(globals, global?)?;
        }
        if self.plan.stubs.is_empty() {
            return Ok(());
        }
        // The virtual clock.
        globals.global(GlobalType { val_type: ValType::I64, mutable: true, shared: false }, &ConstExpr::i64_const(0));
        self.sections.global = true;
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        code: &mut wasm_encoder::CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), ReencodeError<String>> {
        for body in section {
            self.parse_function_body(code, body?)?;
        }
        for (name, _, signature) in &self.plan.stubs {
            code.function(&stub(name, signature, self.plan.clock_global));
        }
        self.sections.code = true;
        Ok(())
    }
}

/// The body of the stub for WASI function `name` (of type `signature`).
fn stub(name: &str, signature: &Signature, clock: u32) -> Function {
    use ValType::{I32, I64};
    let i32s = |n: usize| vec![I32; n];
    let sig = |params: Vec<ValType>| Signature { params, results: vec![I32] };
    let errno_only = |f: &mut Function, errno: i32| {
        f.instructions().i32_const(errno).end();
    };
    let mem32 = MemArg { offset: 0, align: 2, memory_index: 0 };
    let mem64 = |offset| MemArg { offset, align: 3, memory_index: 0 };
    let mut f = Function::new([]);
    match name {
        "args_get" | "environ_get" | "sched_yield" if signature.results == [I32] => errno_only(&mut f, ESUCCESS),
        "args_sizes_get" | "environ_sizes_get" if *signature == sig(i32s(2)) => {
            f.instructions()
                .local_get(0)
                .i32_const(0)
                .i32_store(mem32)
                .local_get(1)
                .i32_const(0)
                .i32_store(mem32)
                .i32_const(ESUCCESS)
                .end();
        }
        // (id, precision, *time)
        "clock_time_get" if *signature == sig(vec![I32, I64, I32]) => {
            f.instructions()
                .global_get(clock)
                .i64_const(CLOCK_STEP_NANOS)
                .i64_add()
                .global_set(clock)
                .local_get(2)
                .global_get(clock)
                .i64_store(mem64(0))
                .i32_const(ESUCCESS)
                .end();
        }
        // (id, *resolution)
        "clock_res_get" if *signature == sig(i32s(2)) => {
            f.instructions().local_get(1).i64_const(CLOCK_STEP_NANOS).i64_store(mem64(0)).i32_const(ESUCCESS).end();
        }
        // (*buf, len)
        "random_get" if *signature == sig(i32s(2)) => {
            f.instructions().local_get(0).i32_const(0).local_get(1).memory_fill(0).i32_const(ESUCCESS).end();
        }
        "fd_write" if *signature == sig(i32s(4)) => return fd_write(),
        "poll_oneoff" if *signature == sig(i32s(4)) => return poll_oneoff(clock),
        _ if signature.results == [I32] && ["fd_", "path_", "sock_"].iter().any(|p| name.starts_with(p)) => {
            errno_only(&mut f, EBADF)
        }
        _ if signature.results == [I32] && name != "proc_exit" => errno_only(&mut f, ENOSYS),
        _ => {
            f.instructions().unreachable().end();
        }
    }
    f
}

/// `fd_write(fd, *iovs, iovs_len, *nwritten)`: fd 1 and 2 take everything (the bytes are
/// dropped, their count written), any other fd is `EBADF`.
fn fd_write() -> Function {
    use ValType::I32;
    let mem32 = MemArg { offset: 0, align: 2, memory_index: 0 };
    let mut f = Function::new([(2, I32)]); // 4: i, 5: total
    f.instructions()
        .local_get(0)
        .i32_const(1)
        .i32_ne()
        .local_get(0)
        .i32_const(2)
        .i32_ne()
        .i32_and()
        .if_(BlockType::Empty)
        .i32_const(EBADF)
        .return_()
        .end()
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(4)
        .local_get(2)
        .i32_ge_u()
        .br_if(1)
        // total += iovs[i].len (iovec: {buf: u32, len: u32})
        .local_get(5)
        .local_get(1)
        .local_get(4)
        .i32_const(8)
        .i32_mul()
        .i32_add()
        .i32_load(MemArg { offset: 4, align: 2, memory_index: 0 })
        .i32_add()
        .local_set(5)
        .local_get(4)
        .i32_const(1)
        .i32_add()
        .local_set(4)
        .br(0)
        .end()
        .end()
        .local_get(3)
        .local_get(5)
        .i32_store(mem32)
        .i32_const(ESUCCESS)
        .end();
    f
}

/// `poll_oneoff(*subscriptions, *events, n, *nevents)`: every subscription is ready at once.
/// subscription (48 bytes): userdata u64 @0, tag u8 @8, clock: id @16, timeout u64 @24,
/// precision @32, flags u16 @40. event (32 bytes): userdata u64 @0, error u16 @8, type u8 @10,
/// fd_readwrite @16. The virtual clock (global `clock`) passes a clock subscription's timeout.
fn poll_oneoff(clock: u32) -> Function {
    use ValType::I32;
    let mem32 = MemArg { offset: 0, align: 2, memory_index: 0 };
    let mem64 = |offset| MemArg { offset, align: 3, memory_index: 0 };
    let mem8 = |offset| MemArg { offset, align: 0, memory_index: 0 };
    let mut f = Function::new([(3, I32)]); // 4: i, 5: *sub, 6: *event
    let mut ins = f.instructions();
    ins.block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(4)
        .local_get(2)
        .i32_ge_u()
        .br_if(1)
        .local_get(0)
        .local_get(4)
        .i32_const(48)
        .i32_mul()
        .i32_add()
        .local_set(5)
        .local_get(1)
        .local_get(4)
        .i32_const(32)
        .i32_mul()
        .i32_add()
        .local_tee(6)
        .i32_const(0)
        .i32_const(32)
        .memory_fill(0)
        // event.userdata = sub.userdata; event.type = sub.tag
        .local_get(6)
        .local_get(5)
        .i64_load(mem64(0))
        .i64_store(mem64(0))
        .local_get(6)
        .local_get(5)
        .i32_load8_u(mem8(8))
        .i32_store8(mem8(10))
        // A clock subscription (tag 0): the virtual clock passes its timeout, or
        // reaches it when absolute (flags bit 0).
        .local_get(5)
        .i32_load8_u(mem8(8))
        .i32_eqz()
        .if_(BlockType::Empty)
        .local_get(5)
        .i32_load16_u(MemArg { offset: 40, align: 1, memory_index: 0 })
        .i32_const(1)
        .i32_and()
        .if_(BlockType::Empty)
        .local_get(5)
        .i64_load(mem64(24))
        .global_get(clock)
        .local_get(5)
        .i64_load(mem64(24))
        .global_get(clock)
        .i64_gt_u()
        .select()
        .global_set(clock)
        .else_()
        .global_get(clock)
        .local_get(5)
        .i64_load(mem64(24))
        .i64_add()
        .global_set(clock)
        .end()
        .end()
        .local_get(4)
        .i32_const(1)
        .i32_add()
        .local_set(4)
        .br(0)
        .end()
        .end()
        .local_get(3)
        .local_get(2)
        .i32_store(mem32)
        .i32_const(ESUCCESS)
        .end();
    f
}

/// The names of a module's `wasi_snapshot_preview1` function imports (for messages and tests).
///
/// # Errors
/// A message when the module does not parse.
pub fn wasi_imports(module: &[u8]) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(module) {
        if let wasmparser::Payload::ImportSection(section) = payload.map_err(|e| e.to_string())? {
            for import in section.into_imports() {
                let import = import.map_err(|e| e.to_string())?;
                if import.module == WASI_PREVIEW1 {
                    names.push(import.name.to_string());
                }
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CodeSection, ElementSection, Elements, EntityType, ExportKind, ExportSection, FunctionSection, GlobalSection,
        ImportSection, MemorySection, MemoryType, Module, RefType, TableSection, TableType, TypeSection,
    };

    /// A module shaped like Go's: WASI imports around a kept import, a defined function that
    /// calls each of them, a table referencing them, an export, globals and a memory.
    fn go_like_module() -> Vec<u8> {
        use ValType::{I32, I64};
        let mut types = TypeSection::new();
        types.ty().function([I32; 4], [I32]); // 0: fd_write, poll_oneoff
        types.ty().function([I32, I64, I32], [I32]); // 1: clock_time_get
        types.ty().function([I32], []); // 2: proc_exit, env.keep
        types.ty().function([I32; 2], [I32]); // 3: random_get, fd_prestat_get, args_sizes_get
        types.ty().function([], [I32]); // 4: run
        let mut imports = ImportSection::new();
        imports.import(WASI_PREVIEW1, "fd_write", EntityType::Function(0)); // 0
        imports.import("env", "keep", EntityType::Function(2)); // 1
        imports.import(WASI_PREVIEW1, "clock_time_get", EntityType::Function(1)); // 2
        imports.import(WASI_PREVIEW1, "proc_exit", EntityType::Function(2)); // 3
        imports.import(WASI_PREVIEW1, "random_get", EntityType::Function(3)); // 4
        imports.import(WASI_PREVIEW1, "fd_prestat_get", EntityType::Function(3)); // 5
        imports.import(WASI_PREVIEW1, "poll_oneoff", EntityType::Function(0)); // 6
        imports.import(WASI_PREVIEW1, "args_sizes_get", EntityType::Function(3)); // 7
        imports.import(WASI_PREVIEW1, "sock_accept", EntityType::Function(3)); // 8 (not a real signature)
        let mut functions = FunctionSection::new();
        functions.function(4); // 9: run
        let mut tables = TableSection::new();
        tables.table(TableType {
            element_type: RefType::FUNCREF,
            minimum: 3,
            maximum: None,
            table64: false,
            shared: false,
        });
        let mut memories = MemorySection::new();
        memories.memory(MemoryType { minimum: 1, maximum: None, memory64: false, shared: false, page_size_log2: None });
        let mut globals = GlobalSection::new();
        globals.global(GlobalType { val_type: I32, mutable: true, shared: false }, &ConstExpr::i32_const(0));
        let mut exports = ExportSection::new();
        exports.export("run", ExportKind::Func, 9);
        exports.export("memory", ExportKind::Memory, 0);
        let mut elements = ElementSection::new();
        elements.active(Some(0), &ConstExpr::i32_const(0), Elements::Functions([0, 9, 2].as_slice().into()));
        let mut code = CodeSection::new();
        let mut run = Function::new([]);
        run.instructions()
            .i32_const(64)
            .i64_const(0)
            .i32_const(128)
            .call(2)
            .drop()
            .i32_const(0)
            .call(1)
            .i32_const(1)
            .i32_const(0)
            .i32_const(0)
            .i32_const(136)
            .call(0)
            .drop()
            .i32_const(0)
            .i32_const(8)
            .call(4)
            .drop()
            .i32_const(3)
            .i32_const(0)
            .call(5)
            .i32_const(0)
            .i32_const(0)
            .call(8)
            .i32_add()
            .end();
        code.function(&run);
        let mut module = Module::new();
        module
            .section(&types)
            .section(&imports)
            .section(&functions)
            .section(&tables)
            .section(&memories)
            .section(&globals)
            .section(&exports)
            .section(&elements)
            .section(&code);
        module.finish()
    }

    #[test]
    fn wasi_imports_become_functions_of_the_module_and_the_rest_is_renumbered() {
        let module = go_like_module();
        wasmparser::Validator::new().validate_all(&module).unwrap();
        assert_eq!(wasi_imports(&module).unwrap().len(), 8);
        let stubbed = stub_wasi(&module).unwrap();
        wasmparser::Validator::new().validate_all(&stubbed).unwrap();
        assert!(wasi_imports(&stubbed).unwrap().is_empty());
        let mut imports = Vec::new();
        let mut exports = Vec::new();
        let mut defined = 0;
        let mut globals = 0;
        for payload in wasmparser::Parser::new(0).parse_all(&stubbed) {
            match payload.unwrap() {
                wasmparser::Payload::ImportSection(s) => {
                    imports.extend(s.into_imports().map(|i| i.unwrap()).map(|i| format!("{}.{}", i.module, i.name)))
                }
                wasmparser::Payload::ExportSection(s) => {
                    exports.extend(s.into_iter().map(|e| e.unwrap()).map(|e| (e.name.to_string(), e.index)))
                }
                wasmparser::Payload::FunctionSection(s) => defined = s.count(),
                wasmparser::Payload::GlobalSection(s) => globals = s.count(),
                _ => {}
            }
        }
        assert_eq!(imports, ["env.keep"]);
        assert_eq!(defined, 1 + 8, "run plus one stub per WASI import");
        assert_eq!(globals, 2, "the module's global plus the virtual clock");
        // `run` was function 9 (after 9 imports); now 1 (after the one kept import).
        assert!(exports.contains(&("run".to_string(), 1)), "{exports:?}");
    }

    #[test]
    fn a_module_without_wasi_imports_is_unchanged_in_substance() {
        let mut module = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([], [ValType::I32]);
        let mut functions = FunctionSection::new();
        functions.function(0);
        let mut exports = ExportSection::new();
        exports.export("f", ExportKind::Func, 0);
        let mut code = CodeSection::new();
        let mut f = Function::new([]);
        f.instructions().i32_const(7).end();
        code.function(&f);
        module.section(&types).section(&functions).section(&exports).section(&code);
        let bytes = module.finish();
        assert_eq!(stub_wasi(&bytes).unwrap(), bytes);
    }

    #[test]
    fn garbage_and_non_function_wasi_imports_are_refused() {
        assert!(stub_wasi(b"not wasm").unwrap_err().starts_with("not a core Wasm module"));
        let mut module = Module::new();
        let mut imports = ImportSection::new();
        imports.import(
            WASI_PREVIEW1,
            "memory",
            EntityType::Memory(MemoryType {
                minimum: 1,
                maximum: None,
                memory64: false,
                shared: false,
                page_size_log2: None,
            }),
        );
        module.section(&imports);
        assert!(stub_wasi(&module.finish()).unwrap_err().contains("is not a function"));
    }
}
