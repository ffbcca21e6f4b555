import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { BrowserRouter } from 'react-router-dom';
import './i18n';
import './styles.css';
import App from './App';
import Root from './Root';
import { makeQueryClient } from './providers';

const client = makeQueryClient();

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <Root client={client}>
      <BrowserRouter>
        <App />
      </BrowserRouter>
    </Root>
  </StrictMode>,
);
