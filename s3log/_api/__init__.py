"""What the blocking and the asyncio log APIs share: the engine and the writer's verbs."""
