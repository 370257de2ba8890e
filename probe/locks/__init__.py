"""Locks and claims: lock files a crash releases and who holds them, one service per workspace
(``workspace_lock``), one writer per database (``database_lock``), and the claim on a shared
filesystem of who writes a target's shared data file (``shared_claim``). Imports only
``layout`` below it."""
