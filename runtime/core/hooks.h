#pragma once

// Points where higher layers plug into runtime/ without runtime including them.

namespace kiln {

class StorageImpl;

// Computes a storage's pending (lazy) contents; installed by jit/.
using MaterializeHook = void (*)(StorageImpl* storage);
void set_materialize_hook(MaterializeHook hook);

// Runs every pending (lazy) computation; installed by jit/.
using SyncHook = void (*)();
void set_sync_hook(SyncHook hook);

}  // namespace kiln
