<?php
throw new RuntimeException("boom");
