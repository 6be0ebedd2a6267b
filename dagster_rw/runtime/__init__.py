"""Runtime: barriers and epochs, the step that advances one object, and the connection's statement handling."""
