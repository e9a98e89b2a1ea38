"""Drop-in persistence for agent frameworks (LangGraph, OpenAI Agents SDK)."""
