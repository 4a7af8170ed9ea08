//! A Valkey 9.1 without its Lua engine (its `lua` module unloaded) and without the module:
//! the store's backend probe answers with one line naming both and what to do, for the
//! automatic choice and for the Functions and scripts backends asked for by name, instead of
//! the server's `ERR Engine 'lua' not found`.

use redis_ratelimit_client::Backend;
use redis_ratelimit_client::store::{RedisStore, RedisStoreOptions};
use redis_ratelimit_testkit::server::valkey_without_lua;

#[tokio::test]
async fn a_valkey_without_the_module_or_lua_gets_one_line_naming_both() {
    let server = valkey_without_lua();
    let url = format!("redis://127.0.0.1:{}/", server.port);
    for (backend, expected) in [
        (
            Backend::Auto,
            "no rate-limit backend on this server: the ratelimit module is not loaded and the \
             server has no Lua engine",
        ),
        (
            Backend::Functions,
            "the functions backend runs Lua and this server has no Lua engine",
        ),
        (
            Backend::Scripts,
            "the scripts backend runs Lua and this server has no Lua engine",
        ),
    ] {
        let options = RedisStoreOptions {
            backend,
            ..RedisStoreOptions::default()
        };
        let store = RedisStore::with_options(&url, options).unwrap();
        let error = store.connect().await.unwrap_err().to_string();
        assert!(error.contains(expected), "{backend}: {error}");
        assert!(
            error.contains("load the ratelimit module") || error.contains("load the module"),
            "{backend}: says what to do: {error}"
        );
        assert!(!error.contains('\n'), "{backend}: one line: {error}");
    }
}
