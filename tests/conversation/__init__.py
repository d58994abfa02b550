"""Tests of the conversation model and its persistence."""
