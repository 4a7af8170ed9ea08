//! Thin, safe wrappers over the Redis module API calls this module makes.
//!
//! Commands are registered with raw `RedisModule_CreateCommand` rather than through
//! `redis-module`'s `Vec<RedisString>` wrapper: on the hot path that wrapper allocates a vector
//! and retains every argument. Everything here reads arguments in place, replies with raw
//! calls and never allocates on the path of an existing key.
//!
//! Every API pointer is an `Option` filled by `RedisModule_Init`. [`missing_apis`] lets
//! `OnLoad` refuse to load on a server lacking any of those used here, and each wrapper
//! still handles `None` without panicking (it reports failure instead).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::MaybeUninit;
use std::ptr::{NonNull, null_mut};
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_module::raw;

/// Reads an API function pointer.
macro_rules! api {
    ($name:ident) => {
        // SAFETY: RedisModule_Init writes these pointers once, during OnLoad, before any
        // command or callback can run; afterwards they are only read.
        unsafe { ::redis_module::raw::$name }
    };
}
pub(crate) use api;

/// The names of the API pointers in `$name...` that the server did not fill.
macro_rules! missing {
    ($($name:ident),* $(,)?) => {
        [$((stringify!($name), api!($name).is_some())),*]
            .into_iter()
            .filter(|(_, present)| !present)
            .map(|(name, _)| name.trim_start_matches("RedisModule_"))
            .collect()
    };
}

/// The name of every API pointer this module calls on servers of all supported versions.
pub fn missing_apis() -> Vec<&'static str> {
    missing!(
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ModuleTypeGetType,
        RedisModule_ModuleTypeGetValue,
        RedisModule_ModuleTypeSetValue,
        RedisModule_SetAbsExpire,
        RedisModule_SetExpire,
        RedisModule_StringPtrLen,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithSimpleString,
        RedisModule_WrongArity,
        RedisModule_Replicate,
        RedisModule_ReplicateVerbatim,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_SignalModifiedKey,
        RedisModule_GetContextFlags,
        RedisModule_Milliseconds,
        RedisModule_Log,
        RedisModule_SaveStringBuffer,
        RedisModule_LoadStringBuffer,
        RedisModule_IsIOError,
        RedisModule_EmitAOF,
        RedisModule_DigestAddStringBuffer,
        RedisModule_DigestEndSequence,
        RedisModule_Free,
        RedisModule_CreateString,
        RedisModule_FreeString,
        RedisModule_DeleteKey,
        RedisModule_IsKeysPositionRequest,
        RedisModule_KeyAtPosWithFlags,
        RedisModule_StringDMA,
        RedisModule_StringSet,
        RedisModule_GetAbsExpire,
        RedisModule_ReplyWithCString,
    )
}

/// The bytes of a Redis string.
///
/// # Safety
/// `string` must be a live Redis string (a command argument or a key name) that outlives
/// `'a`, the lifetime the caller picks: for command arguments, the command's duration.
pub unsafe fn string_bytes<'a>(string: *const raw::RedisModuleString) -> &'a [u8] {
    let Some(ptr_len) = api!(RedisModule_StringPtrLen) else {
        return &[];
    };
    let mut len = 0usize;
    // SAFETY: the caller guarantees `string` is a live Redis string.
    let data = unsafe { ptr_len(string, &mut len) };
    if data.is_null() {
        return &[];
    }
    // SAFETY: Redis guarantees `len` readable bytes at `data` for the string's lifetime, which
    // the caller guarantees covers 'a.
    unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
}

/// One command invocation: its context and arguments.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    ctx: *mut raw::RedisModuleCtx,
    argv: &'a [*mut raw::RedisModuleString],
}

impl<'a> Call<'a> {
    /// Wraps the arguments Redis passes to a command function.
    ///
    /// # Safety
    /// `ctx`, `argv` and `argc` must be those of a command function call in progress.
    pub unsafe fn new(
        ctx: *mut raw::RedisModuleCtx,
        argv: *mut *mut raw::RedisModuleString,
        argc: c_int,
    ) -> Self {
        let count = usize::try_from(argc).unwrap_or(0);
        let argv = if argv.is_null() || count == 0 {
            &[][..]
        } else {
            // SAFETY: Redis passes `argc` valid argument pointers.
            unsafe { std::slice::from_raw_parts(argv, count) }
        };
        Call { ctx, argv }
    }

    /// Number of arguments, the command name included.
    pub fn arg_count(&self) -> usize {
        self.argv.len()
    }

    /// Argument `index` (0 is the command name) as a Redis string.
    pub fn arg(&self, index: usize) -> Option<*mut raw::RedisModuleString> {
        self.argv.get(index).copied()
    }

    /// Argument `index` as bytes (empty if absent).
    pub fn arg_bytes(&self, index: usize) -> &'a [u8] {
        self.argv.get(index).map_or(&[], |&string| {
            // SAFETY: command arguments live until the command returns, which outlives 'a.
            unsafe { string_bytes(string) }
        })
    }

    /// Arguments `range` (indexes into the command's arguments), as bytes, read into
    /// `buffer`; empty past the end. Allocates only for long argument lists. The caller owns
    /// the buffer, so the list is written once where it is used, not built and then moved
    /// (a move of the whole inline list cost a 136-byte copy on every call).
    pub fn args_bytes<'b, R>(&self, range: R, buffer: &'b mut ArgBuffer<'a>) -> &'b [&'a [u8]]
    where
        R: std::slice::SliceIndex<
                [*mut raw::RedisModuleString],
                Output = [*mut raw::RedisModuleString],
            >,
    {
        let strings = self.argv.get(range).unwrap_or_default();
        let ArgBuffer { inline, heap } = buffer;
        if let Some(slots) = inline.get_mut(..strings.len()) {
            for (slot, &string) in slots.iter_mut().zip(strings) {
                // SAFETY: as in arg_bytes.
                slot.write(unsafe { string_bytes(string) });
            }
            let slots: &[MaybeUninit<&'a [u8]>] = slots;
            // SAFETY: `slots` and `strings` have the same length, so the loop wrote every
            // slot; `MaybeUninit<T>` has the layout of `T`.
            return unsafe { &*(std::ptr::from_ref(slots) as *const [&'a [u8]]) };
        }
        heap.clear();
        heap.extend(
            strings
                .iter()
                // SAFETY: as in arg_bytes.
                .map(|&string| unsafe { string_bytes(string) }),
        );
        heap
    }

    /// The arguments in `range`, as Redis strings (empty past the end).
    pub fn arg_strings(&self, range: std::ops::Range<usize>) -> &'a [*mut raw::RedisModuleString] {
        self.argv.get(range).unwrap_or_default()
    }

    /// Whether Redis is asking where the command's keys are (for a command registered with
    /// `getkeys-api`) rather than running it.
    pub fn is_keys_position_request(&self) -> bool {
        api!(RedisModule_IsKeysPositionRequest).is_some_and(|is_request| {
            // SAFETY: live context.
            unsafe { is_request(self.ctx) != 0 }
        })
    }

    /// Answers a keys position request: argument `index` is a key that the command reads
    /// and updates.
    pub fn report_key_at(&self, index: usize) {
        let Ok(position) = c_int::try_from(index) else {
            return;
        };
        let flags = raw::REDISMODULE_CMD_KEY_RW
            | raw::REDISMODULE_CMD_KEY_ACCESS
            | raw::REDISMODULE_CMD_KEY_UPDATE;
        if let Some(report) = api!(RedisModule_KeyAtPosWithFlags) {
            // SAFETY: live context of a keys position request; the flags are key spec flags.
            unsafe { report(self.ctx, position, c_int::try_from(flags).unwrap_or(0)) };
        }
    }

    /// The context flags (`REDISMODULE_CTX_FLAGS_*`).
    pub fn context_flags(&self) -> u32 {
        let Some(flags) = api!(RedisModule_GetContextFlags) else {
            return 0;
        };
        // SAFETY: the context is live for the duration of the command.
        let flags = unsafe { flags(self.ctx) };
        u32::from_ne_bytes(flags.to_ne_bytes())
    }

    /// Opens a key; closed when the returned handle drops. For reading, a missing key gives
    /// `None`.
    pub fn open_key(&self, name: *mut raw::RedisModuleString, mode: KeyMode) -> Option<Key> {
        let open = api!(RedisModule_OpenKey)?;
        let flags = match mode {
            KeyMode::Read => raw::REDISMODULE_READ,
            KeyMode::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        };
        // SAFETY: live context and key name; the mode flags are valid constants.
        let key = unsafe { open(self.ctx, name, c_int::try_from(flags).unwrap_or(0)) };
        NonNull::new(key).map(|key| Key { key })
    }

    /// Replies with an array of integers.
    pub fn reply_integers(&self, values: &[i64]) {
        self.reply_array(values.len());
        let Some(integer) = api!(RedisModule_ReplyWithLongLong) else {
            return;
        };
        for &value in values {
            // SAFETY: live context.
            unsafe { integer(self.ctx, value) };
        }
    }

    /// Starts an array reply of `len` elements (the next `len` replies).
    pub fn reply_array(&self, len: usize) {
        if let Some(array) = api!(RedisModule_ReplyWithArray) {
            // SAFETY: live context; the caller sends `len` elements next.
            unsafe { array(self.ctx, len.try_into().unwrap_or(0)) };
        }
    }

    /// Replies with an integer (or sends one element of an array).
    pub fn reply_integer(&self, value: i64) {
        if let Some(integer) = api!(RedisModule_ReplyWithLongLong) {
            // SAFETY: live context.
            unsafe { integer(self.ctx, value) };
        }
    }

    /// Replies with a simple string.
    pub fn reply_simple(&self, text: &CStr) {
        if let Some(reply) = api!(RedisModule_ReplyWithSimpleString) {
            // SAFETY: live context, NUL-terminated string.
            unsafe { reply(self.ctx, text.as_ptr()) };
        }
    }

    /// Replies with a bulk string (a word such as a regional decision's reason).
    pub fn reply_bulk(&self, text: &CStr) {
        if let Some(reply) = api!(RedisModule_ReplyWithCString) {
            // SAFETY: live context, NUL-terminated string (Redis copies it).
            unsafe { reply(self.ctx, text.as_ptr()) };
        }
    }

    /// Replies with an error; `message` starts with its error code (`ERR`, `WRONGTYPE`...).
    pub fn reply_error(&self, message: &str) {
        let Some(reply) = api!(RedisModule_ReplyWithError) else {
            return;
        };
        let text = c_string(message);
        // SAFETY: live context, NUL-terminated string.
        unsafe { reply(self.ctx, text.as_ptr()) };
    }

    /// Replies with Redis's standard wrong-arity error for this command.
    pub fn reply_wrong_arity(&self) {
        if let Some(wrong_arity) = api!(RedisModule_WrongArity) {
            // SAFETY: live context.
            unsafe { wrong_arity(self.ctx) };
        }
    }

    /// Propagates `command key payload` to replicas and the AOF, after this command.
    pub fn replicate(
        &self,
        command: &CStr,
        key: *mut raw::RedisModuleString,
        payload: &[u8],
    ) -> bool {
        let Some(replicate) = api!(RedisModule_Replicate) else {
            return false;
        };
        // SAFETY: "sb" = RedisModuleString*, (buffer, length): the arguments that follow match
        // it; the payload outlives the call (Redis copies it).
        let status = unsafe {
            replicate(
                self.ctx,
                command.as_ptr(),
                c"sb".as_ptr(),
                key,
                payload.as_ptr().cast::<c_char>(),
                payload.len(),
            )
        };
        status == raw::REDISMODULE_OK as c_int
    }

    /// Propagates `SET key value PXAT expires_at_ms` to replicas and the AOF, after this
    /// command: a plain string with its absolute expiry.
    pub fn replicate_set_pxat(
        &self,
        key: *mut raw::RedisModuleString,
        value: &[u8],
        expires_at_ms: i64,
    ) -> bool {
        let Some(replicate) = api!(RedisModule_Replicate) else {
            return false;
        };
        // SAFETY: "sbcl" = RedisModuleString*, (buffer, length), C string, long long: the
        // arguments that follow match it; Redis copies them.
        let status = unsafe {
            replicate(
                self.ctx,
                c"SET".as_ptr(),
                c"sbcl".as_ptr(),
                key,
                value.as_ptr().cast::<c_char>(),
                value.len(),
                c"PXAT".as_ptr(),
                std::ffi::c_longlong::from(expires_at_ms),
            )
        };
        status == raw::REDISMODULE_OK as c_int
    }

    /// Propagates `command argv...` to replicas and the AOF, after this command: one op, so
    /// a replica applies all of it or none.
    pub fn replicate_argv(&self, command: &CStr, argv: &[*mut raw::RedisModuleString]) -> bool {
        let Some(replicate) = api!(RedisModule_Replicate) else {
            return false;
        };
        // SAFETY: "v" = (RedisModuleString **, size_t count): the two arguments that follow
        // match it; Redis takes its own references to the strings.
        let status = unsafe {
            replicate(
                self.ctx,
                command.as_ptr(),
                c"v".as_ptr(),
                argv.as_ptr(),
                argv.len(),
            )
        };
        status == raw::REDISMODULE_OK as c_int
    }

    /// A new Redis string holding `bytes`, freed when the returned handle drops.
    pub fn create_string(&self, bytes: &[u8]) -> Option<OwnedString> {
        let create = api!(RedisModule_CreateString)?;
        // SAFETY: live context; `bytes` is valid for its length and copied by Redis.
        let string = unsafe { create(self.ctx, bytes.as_ptr().cast::<c_char>(), bytes.len()) };
        NonNull::new(string).map(|string| OwnedString {
            ctx: self.ctx,
            string,
        })
    }

    /// Propagates this command as it was received (for the internal state-setting command).
    pub fn replicate_verbatim(&self) {
        if let Some(replicate) = api!(RedisModule_ReplicateVerbatim) {
            // SAFETY: live context.
            unsafe { replicate(self.ctx) };
        }
    }

    /// Tells WATCH and client-side caching that a key changed, and emits a keyspace event.
    pub fn announce_write(&self, event: &CStr, key: *mut raw::RedisModuleString) {
        if let Some(signal) = api!(RedisModule_SignalModifiedKey) {
            // SAFETY: live context and key name.
            unsafe { signal(self.ctx, key) };
        }
        if let Some(notify) = api!(RedisModule_NotifyKeyspaceEvent) {
            // SAFETY: live context, NUL-terminated event name, live key name.
            unsafe {
                notify(
                    self.ctx,
                    raw::REDISMODULE_NOTIFY_MODULE,
                    event.as_ptr(),
                    key,
                )
            };
        }
    }
}

/// Arguments read without allocating: as many as any single-key command takes after its key
/// (`RL.PEEK key ALGORITHM a b cost PARTIAL MIN m`).
const INLINE_ARGS: usize = 8;

/// Where [`Call::args_bytes`] reads arguments: on the stack when few, on the heap otherwise.
/// The stack slots start uninitialised: each call writes those it returns (initialising all
/// of them cost 16 stores a call).
pub struct ArgBuffer<'a> {
    inline: [MaybeUninit<&'a [u8]>; INLINE_ARGS],
    heap: Vec<&'a [u8]>,
}

impl ArgBuffer<'_> {
    /// An empty buffer (allocates nothing).
    pub const fn new() -> Self {
        ArgBuffer {
            inline: [const { MaybeUninit::uninit() }; INLINE_ARGS],
            heap: Vec::new(),
        }
    }
}

/// A Redis string this module created, freed on drop.
pub struct OwnedString {
    ctx: *mut raw::RedisModuleCtx,
    string: NonNull<raw::RedisModuleString>,
}

impl OwnedString {
    /// The string, for passing to the API.
    pub fn as_ptr(&self) -> *mut raw::RedisModuleString {
        self.string.as_ptr()
    }
}

impl Drop for OwnedString {
    fn drop(&mut self) {
        if let Some(free) = api!(RedisModule_FreeString) {
            // SAFETY: the string was created with this context and is freed exactly once;
            // anything Redis kept (a propagated argument) holds its own reference.
            unsafe { free(self.ctx, self.string.as_ptr()) };
        }
    }
}

/// How a key is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyMode {
    /// For reading only.
    Read,
    /// For reading and writing.
    Write,
}

/// What an open key holds.
pub enum KeyContent {
    /// Nothing (missing or expired).
    Empty,
    /// A value of this module's type: the raw value pointer.
    Limiter(*mut c_void),
    /// A value of another type.
    Other,
}

/// An open key, closed on drop.
pub struct Key {
    key: NonNull<raw::RedisModuleKey>,
}

impl Key {
    /// What the key holds, given this module's type.
    pub fn content(&self, limiter_type: *mut raw::RedisModuleType) -> KeyContent {
        let (Some(key_type), Some(get_type), Some(get_value)) = (
            api!(RedisModule_KeyType),
            api!(RedisModule_ModuleTypeGetType),
            api!(RedisModule_ModuleTypeGetValue),
        ) else {
            return KeyContent::Other;
        };
        let key = self.key.as_ptr();
        // The common case first: a limiter (the type is null for an empty key or another
        // Redis type, so one call tells it).
        // SAFETY: the key is open.
        if unsafe { get_type(key) } == limiter_type {
            // SAFETY: the key is open and holds a value of this module's type.
            return KeyContent::Limiter(unsafe { get_value(key) });
        }
        // SAFETY: the key is open.
        match unsafe { key_type(key) } as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyContent::Empty,
            _ => KeyContent::Other,
        }
    }

    /// Whether the key holds a Redis string.
    pub fn is_string(&self) -> bool {
        let Some(key_type) = api!(RedisModule_KeyType) else {
            return false;
        };
        // SAFETY: the key is open.
        unsafe { key_type(self.key.as_ptr()) as isize == raw::REDISMODULE_KEYTYPE_STRING }
    }

    /// The bytes of the string the key holds (empty if it holds none), valid while the key
    /// stays open and unmodified.
    pub fn string_bytes(&self) -> &[u8] {
        let Some(dma) = api!(RedisModule_StringDMA) else {
            return &[];
        };
        let mut len = 0usize;
        let read = c_int::try_from(raw::REDISMODULE_READ).unwrap_or(0);
        // SAFETY: the key is open; StringDMA in read mode returns the string's buffer and
        // length (or null for a key holding no string) without changing the key.
        let ptr = unsafe { dma(self.key.as_ptr(), &mut len, read) };
        if ptr.is_null() {
            return &[];
        }
        // SAFETY: Redis's buffer of `len` bytes, alive while the key is open and untouched;
        // the returned borrow of `self` keeps it so (writes need `&self` after it ends).
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }

    /// The key's absolute expiry (Unix ms), if it has one.
    pub fn expires_at_ms(&self) -> Option<i64> {
        let get = api!(RedisModule_GetAbsExpire)?;
        // SAFETY: the key is open.
        let expiry = unsafe { get(self.key.as_ptr()) };
        (expiry != i64::from(raw::REDISMODULE_NO_EXPIRE)).then_some(expiry)
    }

    /// Stores a Redis string in the key (replacing any value, and removing its expiry).
    pub fn set_string(&self, value: *mut raw::RedisModuleString) -> bool {
        let Some(set) = api!(RedisModule_StringSet) else {
            return false;
        };
        // SAFETY: the key is open for writing; Redis copies (or retains) the string.
        unsafe { set(self.key.as_ptr(), value) == raw::REDISMODULE_OK as c_int }
    }

    /// Stores a new value in the key (replacing any), taking ownership of `value`.
    ///
    /// On failure the value is handed back so the caller can free it.
    pub fn set_value(
        &self,
        limiter_type: *mut raw::RedisModuleType,
        value: *mut c_void,
    ) -> Result<(), *mut c_void> {
        let Some(set) = api!(RedisModule_ModuleTypeSetValue) else {
            return Err(value);
        };
        // SAFETY: the key is open for writing; Redis takes ownership of `value` on success.
        let status = unsafe { set(self.key.as_ptr(), limiter_type, value) };
        if status == raw::REDISMODULE_OK as c_int {
            Ok(())
        } else {
            Err(value)
        }
    }

    /// Sets the key's expiry to an absolute Unix time in milliseconds.
    pub fn expire_at_ms(&self, unix_ms: i64) {
        if let Some(set) = api!(RedisModule_SetAbsExpire) {
            // SAFETY: the key is open for writing and not empty.
            unsafe { set(self.key.as_ptr(), unix_ms) };
        }
    }

    /// Deletes the key's value (the key stays open, empty).
    pub fn delete(&self) -> bool {
        let Some(delete) = api!(RedisModule_DeleteKey) else {
            return false;
        };
        // SAFETY: the key is open for writing.
        unsafe { delete(self.key.as_ptr()) == raw::REDISMODULE_OK as c_int }
    }

    /// Removes the key's expiry.
    pub fn persist(&self) {
        if let Some(set) = api!(RedisModule_SetExpire) {
            // SAFETY: the key is open for writing; REDISMODULE_NO_EXPIRE (-1) removes expiry.
            unsafe { set(self.key.as_ptr(), -1) };
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if let Some(close) = api!(RedisModule_CloseKey) {
            // SAFETY: the key was opened by OpenKey and is closed exactly once.
            unsafe { close(self.key.as_ptr()) };
        }
    }
}

/// A NUL-terminated copy of `text`, with interior NULs replaced (they cannot be sent).
pub fn c_string(text: &str) -> std::ffi::CString {
    let bytes: Vec<u8> = text
        .bytes()
        .map(|b| if b == 0 { b'?' } else { b })
        .collect();
    std::ffi::CString::new(bytes).unwrap_or_default()
}

/// A context that lives as long as the module, so lines logged from anywhere (type callbacks,
/// the panic hook) carry the module's name.
static LOG_CONTEXT: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(null_mut());

/// Creates the logging context; called once from `OnLoad`.
pub fn init_log_context(ctx: *mut raw::RedisModuleCtx) {
    if let Some(detached) = api!(RedisModule_GetDetachedThreadSafeContext) {
        // SAFETY: called during OnLoad with the module's own context.
        LOG_CONTEXT.store(unsafe { detached(ctx) }, Ordering::Relaxed);
    }
}

/// Writes a line to the Redis log at `level` (`c"warning"`, `c"notice"`, ...).
pub fn log(level: &CStr, message: &str) {
    let Some(log) = api!(RedisModule_Log) else {
        return;
    };
    let text = c_string(message);
    // SAFETY: the context is the module's detached context, or NULL before it exists (Redis
    // then logs under a generic name); "%s" consumes exactly the one NUL-terminated argument
    // that follows.
    unsafe {
        log(
            LOG_CONTEXT.load(Ordering::Relaxed),
            level.as_ptr(),
            c"%s".as_ptr(),
            text.as_ptr(),
        )
    };
}

/// One field of one `INFO` section as text (`None` when the server lacks the API, the
/// section or the field). Used during `OnLoad`, to learn which server this is.
pub fn server_info_field(
    ctx: *mut raw::RedisModuleCtx,
    section: &CStr,
    field: &CStr,
) -> Option<String> {
    let (Some(get_info), Some(get_field), Some(free_info)) = (
        api!(RedisModule_GetServerInfo),
        api!(RedisModule_ServerInfoGetFieldC),
        api!(RedisModule_FreeServerInfo),
    ) else {
        return None;
    };
    // SAFETY: a live context (OnLoad's); the section name is NUL-terminated.
    let info = unsafe { get_info(ctx, section.as_ptr()) };
    if info.is_null() {
        return None;
    }
    // SAFETY: `info` was just returned by GetServerInfo and is freed only below; the field
    // name is NUL-terminated.
    let value = unsafe { get_field(info, field.as_ptr()) };
    let text = (!value.is_null()).then(|| {
        // SAFETY: a non-NULL field value is a NUL-terminated string owned by `info`, which
        // is still alive; it is copied before `info` is freed.
        unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned()
    });
    // SAFETY: `info` came from GetServerInfo with the same context and is freed once.
    unsafe { free_info(ctx, info) };
    text
}

/// Every module option flag this server knows (`RedisModule_GetModuleOptionsAll`, Redis 7.2
/// and Valkey), or `None` on an older server.
pub fn module_options_all() -> Option<c_int> {
    let options_all = api!(RedisModule_GetModuleOptionsAll)?;
    // SAFETY: takes no arguments and only reads a server constant.
    Some(unsafe { options_all() })
}
