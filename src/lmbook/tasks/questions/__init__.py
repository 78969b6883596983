"""Thinking questions: each exercise's derive, count and predict questions, graded as small functions."""
